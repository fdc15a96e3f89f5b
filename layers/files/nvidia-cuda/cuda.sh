# imgbuild: the CUDA toolkit on every login shell's PATH.
case ":$PATH:" in
  *:/usr/local/cuda/bin:*) ;;
  *) PATH="/usr/local/cuda/bin:$PATH" ;;
esac
export PATH
