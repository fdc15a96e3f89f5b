# bootd: modules EasyBuild installs in the shared tree (NFS from the master) come first, and
# EasyBuild installs there: software under /opt/software/software, modules under modules/all.
# The operating system's module files come last: Rocky's MPI packages put theirs under
# /usr/share/modulefiles (module load mpi/openmpi-x86_64), which OpenHPC's lmod.sh, run before
# this file, leaves out of MODULEPATH (only its "os" module adds them).
case ":${MODULEPATH:-}:" in
*:/opt/software/modules/all:*) ;;
*) MODULEPATH="/opt/software/modules/all${MODULEPATH:+:$MODULEPATH}" ;;
esac
for _bootd_dir in /etc/modulefiles /usr/share/modulefiles; do
	case ":$MODULEPATH:" in
	*:"$_bootd_dir":*) ;;
	*) MODULEPATH="$MODULEPATH:$_bootd_dir" ;;
	esac
done
unset _bootd_dir
export MODULEPATH
EASYBUILD_INSTALLPATH=${EASYBUILD_INSTALLPATH:-/opt/software}
export EASYBUILD_INSTALLPATH
