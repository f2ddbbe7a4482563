/*
 * hosts.c: MPI ranks spread over several "hosts", every pair talking.
 *
 * Run by crates/ofi-capi/tests/clients.rs (test
 * mpi_four_ranks_on_two_namespace_hosts): 4 ranks, 2 in each of two
 * network namespaces joined by a veth pair, made two nodes for ofi's
 * hybrid offer with FI_HYBRID_NODE, launched by mpirun in the first
 * namespace through a launcher agent that enters the second (see the test
 * for the command). pml cm + the ofi MTL with no provider named: the
 * ranks use ofi's hybrid offer, shm between ranks of one host and tcp
 * across the hosts.
 *
 * Phases, in order, each printed as "hosts: <phase> ok" by rank 0:
 *   where      every rank reports its host (FI_HYBRID_NODE) and the
 *              libfabric.so.1 it loaded; rank 0 prints one line per rank,
 *              "hosts: rank R on HOST libfabric PATH"
 *   pairs      a ping-pong between every pair of ranks, one pair at a
 *              time, at 8 B, 4 KiB, 64 KiB and 1 MiB, 20 round trips per
 *              size, every message's bytes checked (they depend on the
 *              pair, the size, the round trip and the direction)
 *   allreduce  MPI_Allreduce (sum) of 4096 64-bit integers per rank,
 *              checked on every rank; then MPI_Allreduce of one double
 *   barrier    MPI_Barrier, twice
 * Then "hosts: all checks passed". A failed check prints
 * "hosts rank R: FAIL <phase>: <why>" and aborts; a phase that does not
 * finish within PHASE_SECONDS prints "hosts rank R: TIMEOUT in <phase>"
 * and exits 3.
 */
#include <mpi.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PHASE_SECONDS 60
#define ROUNDS 20
#define WORDS 4096

static int rank, size;
static const char *volatile phase = "init";

static void on_alarm(int sig)
{
    (void)sig;
    char buf[160];
    int n = snprintf(buf, sizeof buf, "hosts rank %d: TIMEOUT in %s\n", rank, phase);
    if (n > 0)
        (void)!write(2, buf, (size_t)n);
    _exit(3);
}

static void start(const char *name)
{
    phase = name;
    alarm(PHASE_SECONDS);
}

static void done(void)
{
    alarm(0);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("hosts: %s ok\n", phase);
        fflush(stdout);
    }
}

static void fail(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "hosts rank %d: FAIL %s: ", rank, phase);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* The libfabric.so.1 this process mapped, from /proc/self/maps. */
static void libfabric_path(char *out, size_t n)
{
    snprintf(out, n, "(none)");
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *p = strchr(line, '/');
        if (p && strstr(p, "libfabric")) {
            p[strcspn(p, "\n")] = 0;
            snprintf(out, n, "%s", p);
            break;
        }
    }
    fclose(f);
}

static unsigned char byte_at(int from, int to, size_t len, int round, size_t i)
{
    return (unsigned char)(i * 131u + (unsigned)len * 7u + (unsigned)round * 17u +
                           (unsigned)from * 29u + (unsigned)to * 53u + 1u);
}

static void fill(unsigned char *b, int from, int to, size_t len, int round)
{
    for (size_t i = 0; i < len; i++)
        b[i] = byte_at(from, to, len, round, i);
}

static void check(const unsigned char *b, int from, int to, size_t len, int round)
{
    for (size_t i = 0; i < len; i++) {
        if (b[i] != byte_at(from, to, len, round, i))
            fail("%zu B from rank %d, round trip %d: byte %zu is %u, want %u", len, from,
                 round, i, b[i], byte_at(from, to, len, round, i));
    }
}

/* One ping-pong between ranks a (first) and b, checked both ways. */
static void pingpong(int a, int b, unsigned char *buf, const size_t *sizes, int nsizes)
{
    int me = rank, peer = rank == a ? b : a;
    for (int s = 0; s < nsizes; s++) {
        size_t len = sizes[s];
        for (int r = 0; r < ROUNDS; r++) {
            int tag = s * ROUNDS + r;
            MPI_Status st;
            int got;
            if (me == a) {
                fill(buf, a, b, len, r);
                MPI_Send(buf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
                memset(buf, 0, len);
                MPI_Recv(buf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st);
                MPI_Get_count(&st, MPI_BYTE, &got);
                if ((size_t)got != len)
                    fail("reply from rank %d: %d bytes, want %zu", peer, got, len);
                check(buf, b, a, len, r);
            } else {
                memset(buf, 0, len);
                MPI_Recv(buf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st);
                MPI_Get_count(&st, MPI_BYTE, &got);
                if ((size_t)got != len)
                    fail("message from rank %d: %d bytes, want %zu", peer, got, len);
                check(buf, a, b, len, r);
                fill(buf, b, a, len, r);
                MPI_Send(buf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
            }
        }
    }
}

int main(int argc, char **argv)
{
    signal(SIGALRM, on_alarm);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    setvbuf(stdout, NULL, _IOLBF, 0);

    start("where");
    char mine[256] = {0};
    char path[200];
    const char *host = getenv("FI_HYBRID_NODE");
    libfabric_path(path, sizeof path);
    snprintf(mine, sizeof mine, "%s libfabric %s", host ? host : "(unset)", path);
    char *all = rank == 0 ? calloc((size_t)size, sizeof mine) : NULL;
    if (rank == 0 && !all)
        fail("out of memory");
    MPI_Gather(mine, sizeof mine, MPI_CHAR, all, sizeof mine, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        for (int r = 0; r < size; r++)
            printf("hosts: rank %d on %s\n", r, all + (size_t)r * sizeof mine);
        free(all);
    }
    done();

    start("pairs");
    static const size_t sizes[] = {8, 4096, 65536, 1 << 20};
    unsigned char *buf = malloc(1 << 20);
    if (!buf)
        fail("out of memory");
    for (int a = 0; a < size; a++) {
        for (int b = a + 1; b < size; b++) {
            if (rank == a || rank == b)
                pingpong(a, b, buf, sizes, 4);
            MPI_Barrier(MPI_COMM_WORLD);
            if (rank == 0)
                printf("hosts: pair %d-%d ok\n", a, b);
        }
    }
    free(buf);
    done();

    start("allreduce");
    int64_t *in = malloc(WORDS * sizeof *in), *out = malloc(WORDS * sizeof *out);
    if (!in || !out)
        fail("out of memory");
    for (int i = 0; i < WORDS; i++)
        in[i] = (int64_t)(rank + 1) * 1000003 + i;
    MPI_Allreduce(in, out, WORDS, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    int64_t ranks = (int64_t)size * (size + 1) / 2;
    for (int i = 0; i < WORDS; i++) {
        int64_t want = ranks * 1000003 + (int64_t)size * i;
        if (out[i] != want)
            fail("word %d is %lld, want %lld", i, (long long)out[i], (long long)want);
    }
    free(in);
    free(out);
    double x = rank + 0.5, sum = 0;
    MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (sum != size * (size - 1) / 2.0 + size * 0.5)
        fail("double sum %g, want %g", sum, size * (size - 1) / 2.0 + size * 0.5);
    done();

    start("barrier");
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    done();

    if (rank == 0)
        printf("hosts: all checks passed\n");
    MPI_Finalize();
    return 0;
}
