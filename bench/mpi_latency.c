/*
 * mpi_latency.c: MPI ping-pong latency between two ranks, for comparing one
 * Open MPI build on two libfabric libraries (ofi's libfabric.so.1 and
 * Debian's) through the cm PML and the ofi MTL. bench/compare.sh runs it
 * (MPI=1); by hand:
 *
 *   mpicc -O2 -o mpi_latency bench/mpi_latency.c
 *   FI_TCP_IFACE=lo [LD_LIBRARY_PATH=DIR_WITH_OFIS_libfabric.so.1] \
 *   mpirun --allow-run-as-root -np 2 --bind-to core --map-by core \
 *       [-x LD_LIBRARY_PATH] -x FI_TCP_IFACE \
 *       --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tcp \
 *       --mca btl self --mca oob_tcp_if_include lo ./mpi_latency [ITERS] [SIZE...]
 *
 * For each size (default 8) rank 0 sends, rank 1 answers, ITERS times
 * (default 100000) after ITERS/10 warm-up round trips; rank 0 prints one
 * line per size: "size <bytes> iters <n> usec <one-way microseconds>", the
 * one-way time being half the mean round trip. The data of the last
 * message of each size is checked on both ranks (a mismatch exits 2).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(i * 31u + seed);
}

static int check(const unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)(i * 31u + seed))
            return 0;
    return 1;
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0)
            fprintf(stderr, "mpi_latency: needs exactly 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    long iters = argc > 1 ? atol(argv[1]) : 100000;
    if (iters < 1)
        iters = 1;
    int nsizes = argc > 2 ? argc - 2 : 1;
    for (int s = 0; s < nsizes; s++) {
        size_t n = argc > 2 ? (size_t)atol(argv[2 + s]) : 8;
        unsigned char *tx = malloc(n ? n : 1), *rx = malloc(n ? n : 1);
        if (!tx || !rx)
            MPI_Abort(MPI_COMM_WORLD, 1);
        fill(tx, n, (unsigned)rank + 1);
        int peer = 1 - rank;
        double t0 = 0;
        long warm = iters / 10;
        for (long i = -warm; i < iters; i++) {
            if (i == 0) {
                MPI_Barrier(MPI_COMM_WORLD);
                t0 = MPI_Wtime();
            }
            if (rank == 0) {
                MPI_Send(tx, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                MPI_Recv(rx, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(rx, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(tx, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            }
        }
        double t = MPI_Wtime() - t0;
        if (!check(rx, n, (unsigned)peer + 1)) {
            fprintf(stderr, "mpi_latency rank %d: data mismatch at size %zu\n", rank, n);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        if (rank == 0)
            printf("size %zu iters %ld usec %.4f\n", n, iters, t * 1e6 / (2.0 * (double)iters));
        free(tx);
        free(rx);
    }
    MPI_Finalize();
    return 0;
}
