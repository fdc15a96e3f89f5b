# bootd: modules EasyBuild installs in the shared tree (NFS from the master), and EasyBuild
# installing there: software under /opt/software/software, modules under modules/all.
case ":${MODULEPATH:-}:" in
*:/opt/software/modules/all:*) ;;
*) MODULEPATH="/opt/software/modules/all${MODULEPATH:+:$MODULEPATH}"; export MODULEPATH ;;
esac
EASYBUILD_INSTALLPATH=${EASYBUILD_INSTALLPATH:-/opt/software}
export EASYBUILD_INSTALLPATH
