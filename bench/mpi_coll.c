/*
 * mpi_coll.c: latency of MPI_Barrier, an 8 B MPI_Allreduce (one
 * MPI_UINT64_T, MPI_SUM) and a 4 KiB MPI_Bcast (root 0) between two ranks,
 * each timed one by one as bench/coll_latency.c times fi_barrier,
 * fi_allreduce and fi_broadcast: the reference of bench/compare.sh's
 * collective rows (OPS containing coll). By hand:
 *
 *   mpicc -O2 -o mpi_coll bench/mpi_coll.c
 *   mpirun --allow-run-as-root -np 2 --bind-to core --map-by core \
 *       --mca pml ob1 --mca btl vader,self ./mpi_coll [ITERS]
 *
 * Each operation runs ITERS times (default 20000) after ITERS/10 warm-up
 * ones; rank 0 prints one line per operation, as coll_latency does:
 *   "op <name> iters <n> median_us <m> p99_us <p>"
 * and the results are checked (a wrong sum or broadcast exits 2).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    static const char *names[] = { "barrier", "allreduce8", "broadcast4k" };
    static unsigned char buf[4096];
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0)
            fprintf(stderr, "mpi_coll: needs exactly 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    long iters = argc > 1 ? atol(argv[1]) : 20000;
    if (iters < 10)
        iters = 10;
    double *t = malloc(sizeof(double) * (size_t)iters);
    if (!t)
        MPI_Abort(MPI_COMM_WORLD, 1);
    for (int op = 0; op < 3; op++) {
        for (long i = -(iters / 10); i < iters; i++) {
            uint64_t one = (uint64_t)rank + 1, sum = 0;
            if (op == 2)
                memset(buf, rank == 0 ? (int)(i & 0xff) : 0, sizeof buf);
            double t0 = MPI_Wtime();
            if (op == 0)
                MPI_Barrier(MPI_COMM_WORLD);
            else if (op == 1)
                MPI_Allreduce(&one, &sum, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
            else
                MPI_Bcast(buf, sizeof buf, MPI_BYTE, 0, MPI_COMM_WORLD);
            double t1 = MPI_Wtime();
            if (i >= 0)
                t[i] = (t1 - t0) * 1e6;
            if ((op == 1 && sum != 3) ||
                (op == 2 && (buf[0] != (unsigned char)(i & 0xff) ||
                             buf[4095] != (unsigned char)(i & 0xff)))) {
                fprintf(stderr, "mpi_coll: rank %d: wrong %s result\n", rank, names[op]);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
        }
        qsort(t, (size_t)iters, sizeof(double), cmp);
        if (rank == 0)
            printf("op %s iters %ld median_us %.2f p99_us %.2f\n", names[op], iters,
                   t[iters / 2], t[(iters * 99) / 100]);
        fflush(stdout);
    }
    free(t);
    MPI_Finalize();
    return 0;
}
