/* A user's first MPI job: every rank adds rank+1 into one sum (MPI_Allreduce) and prints it
 * with where it ran. Build on the master, run across nodes with srun (slurm.conf's MpiDefault
 * gives each task PMIx, which Open MPI uses to wire up):
 *     mpicc -O2 -o allreduce allreduce.c && srun -N3 --ntasks-per-node=1 ./allreduce
 */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
	int rank, size, len, sum, mine;
	char host[MPI_MAX_PROCESSOR_NAME];

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Get_processor_name(host, &len);
	mine = rank + 1;
	MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	printf("rank %d of %d on %s: allreduce %d\n", rank, size, host, sum);
	MPI_Finalize();
	return 0;
}
