# bootd: modules EasyBuild installs in the shared tree (NFS from the master).
case ":${MODULEPATH:-}:" in
*:/opt/software/modules/all:*) ;;
*) MODULEPATH="/opt/software/modules/all${MODULEPATH:+:$MODULEPATH}"; export MODULEPATH ;;
esac
