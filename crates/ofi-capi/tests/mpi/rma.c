/*
 * rma.c: MPI one-sided operations through Open MPI's ofi BTL, checked.
 *
 * Run by crates/ofi-capi/tests/clients.rs (test mpi_rma_over_ofi_btl_shm)
 * exactly like this, with LIBDIR a directory holding a `libfabric.so.1`
 * symlink to ofi's target/release/libfabric.so (leave LD_LIBRARY_PATH unset
 * to run on Debian's libfabric instead):
 *
 *   mpicc -O2 -o rma crates/ofi-capi/tests/mpi/rma.c
 *   LD_LIBRARY_PATH=LIBDIR mpirun --allow-run-as-root --oversubscribe -np 2 \
 *       -x LD_LIBRARY_PATH \
 *       --mca pml ob1 --mca btl ofi,self,tcp \
 *       --mca btl_ofi_provider_include shm \
 *       --mca osc rdma --mca osc_rdma_btls ofi \
 *       --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
 *       ./rma
 *
 * `--mca osc rdma` leaves MPI's one-sided framework nothing but the rdma
 * component, and the only BTL in the list that does RDMA is ofi (Open MPI's
 * tcp BTL does none; vader, which does, is left out), so every Put, Get,
 * Accumulate and Compare_and_swap below is a libfabric RMA or atomic
 * operation. Probed on Debian's libfabric: with a provider that does not
 * exist (btl_ofi_provider_include nosuch) MPI_Win_create fails with
 * MPI_ERR_WIN, so nothing else can stand in. The ofi BTL runs one-sided
 * only (its default btl_ofi_mode 0); ob1's two-sided traffic (fence and
 * lock messages, barriers) goes over the tcp BTL on loopback.
 *
 * Exactly 2 ranks. Each phase prints "rma: <phase> ok" on rank 0; a failed
 * check prints "rma rank R: FAIL <phase>: <why>" and exits nonzero; a phase
 * that hangs prints "rma rank R: TIMEOUT in <phase>" and exits 3. Rank 0
 * first prints "rma: libfabric <path>", the libfabric.so.1 really loaded.
 */
#include <mpi.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PHASE_SECONDS 30
#define N 4096 /* int64 elements in each rank's window */

static int rank;
static const char *volatile phase = "init";

static void on_alarm(int sig)
{
    (void)sig;
    char buf[160];
    int n = snprintf(buf, sizeof buf, "rma rank %d: TIMEOUT in %s\n", rank, phase);
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
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("rma: %s ok\n", phase);
    fflush(stdout);
}

__attribute__((format(printf, 1, 2), noreturn)) static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "rma rank %d: FAIL %s: ", rank, phase);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

static void ok(int rc, const char *call)
{
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0, cls = 0;
        MPI_Error_string(rc, msg, &len);
        MPI_Error_class(rc, &cls);
        fail("%s returned %d (class %d: %s)", call, rc, cls, msg);
    }
}

/* The value element i of rank r's window holds after the "init" phase. */
static int64_t initial(int r, int64_t i)
{
    return 1000000 * (r + 1) + i;
}

static void report_library(void)
{
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[4096];
    if (maps) {
        while (fgets(line, sizeof line, maps)) {
            char *p = strchr(line, '/');
            if (p && strstr(p, "libfabric.so")) {
                printf("rma: libfabric %s", p);
                fclose(maps);
                return;
            }
        }
        fclose(maps);
    }
    printf("rma: libfabric (none)\n");
}

static int64_t *mem; /* this rank's window */
static MPI_Win win;

/* Element i of this rank's own window, read under an exclusive lock so
 * that every flushed remote update is visible. */
static int64_t own(int i)
{
    ok(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win), "MPI_Win_lock(self)");
    int64_t v = mem[i];
    ok(MPI_Win_unlock(rank, win), "MPI_Win_unlock(self)");
    return v;
}

int main(int argc, char **argv)
{
    signal(SIGALRM, on_alarm);
    alarm(PHASE_SECONDS);
    MPI_Init(&argc, &argv);
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (size != 2)
        fail("%d ranks, want 2", size);
    if (rank == 0)
        report_library();
    int peer = 1 - rank;

    start("win_create");
    mem = malloc(N * sizeof *mem);
    int64_t *local = malloc(N * sizeof *local);
    if (!mem || !local)
        fail("malloc");
    for (int64_t i = 0; i < N; i++)
        mem[i] = initial(rank, i);
    ok(MPI_Win_create(mem, N * sizeof *mem, sizeof *mem, MPI_INFO_NULL, MPI_COMM_WORLD, &win), "MPI_Win_create");
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    done();

    /* Get (fence epoch): the peer's whole window, then one element. */
    start("get");
    ok(MPI_Win_fence(0, win), "MPI_Win_fence");
    memset(local, 0, N * sizeof *local);
    ok(MPI_Get(local, N, MPI_INT64_T, peer, 0, N, MPI_INT64_T, win), "MPI_Get");
    int64_t one = 0;
    ok(MPI_Get(&one, 1, MPI_INT64_T, peer, N - 7, 1, MPI_INT64_T, win), "MPI_Get");
    ok(MPI_Win_fence(0, win), "MPI_Win_fence");
    for (int64_t i = 0; i < N; i++) {
        if (local[i] != initial(peer, i))
            fail("MPI_Get element %ld: %ld, want %ld", (long)i, (long)local[i], (long)initial(peer, i));
    }
    if (one != initial(peer, N - 7))
        fail("MPI_Get of one element: %ld, want %ld", (long)one, (long)initial(peer, N - 7));
    done();

    /* Put (fence epoch): the first half of the peer's window and its last
     * element; the rest must stay untouched. */
    start("put");
    for (int64_t i = 0; i < N / 2; i++)
        local[i] = -(int64_t)(rank + 1) * (i + 1);
    ok(MPI_Win_fence(0, win), "MPI_Win_fence");
    ok(MPI_Put(local, N / 2, MPI_INT64_T, peer, 0, N / 2, MPI_INT64_T, win), "MPI_Put");
    int64_t mark = 77 + rank;
    ok(MPI_Put(&mark, 1, MPI_INT64_T, peer, N - 1, 1, MPI_INT64_T, win), "MPI_Put");
    ok(MPI_Win_fence(0, win), "MPI_Win_fence");
    for (int64_t i = 0; i < N; i++) {
        int64_t want = i < N / 2 ? -(int64_t)(peer + 1) * (i + 1) : i == N - 1 ? 77 + peer : initial(rank, i);
        if (mem[i] != want)
            fail("window element %ld after the peer's MPI_Put: %ld, want %ld", (long)i, (long)mem[i], (long)want);
    }
    done();

    /* Passive target: lock, put, flush, get back, unlock. */
    start("put+get under lock");
    ok(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, peer, 0, win), "MPI_Win_lock");
    int64_t v = 5550000 + rank, back = 0;
    ok(MPI_Put(&v, 1, MPI_INT64_T, peer, 10 + rank, 1, MPI_INT64_T, win), "MPI_Put");
    ok(MPI_Win_flush(peer, win), "MPI_Win_flush");
    ok(MPI_Get(&back, 1, MPI_INT64_T, peer, 10 + rank, 1, MPI_INT64_T, win), "MPI_Get");
    ok(MPI_Win_unlock(peer, win), "MPI_Win_unlock");
    if (back != v)
        fail("MPI_Get after a flushed MPI_Put: %ld, want %ld", (long)back, (long)v);
    done();

    /* Accumulate: both ranks add into rank 0's window (fence epoch), a whole
     * vector and then single elements. Only MPI_SUM: Open MPI 4.1.4's ofi BTL
     * maps no other reduction to a libfabric atomic and aborts the job
     * ("Unknown or unsupported atomic op") whatever the provider. */
    start("accumulate");
    ok(MPI_Win_fence(0, win), "MPI_Win_fence");
    if (rank == 0) {
        for (int64_t i = 0; i < N; i++)
            mem[i] = i;
    }
    ok(MPI_Win_fence(0, win), "MPI_Win_fence");
    for (int64_t i = 0; i < N; i++)
        local[i] = (rank + 1) * 10;
    ok(MPI_Accumulate(local, N, MPI_INT64_T, 0, 0, N, MPI_INT64_T, MPI_SUM, win), "MPI_Accumulate(SUM)");
    ok(MPI_Win_fence(0, win), "MPI_Win_fence");
    if (rank == 0) {
        for (int64_t i = 0; i < N; i++) {
            if (mem[i] != i + 30)
                fail("MPI_Accumulate(SUM) element %ld: %ld, want %ld", (long)i, (long)mem[i], (long)(i + 30));
        }
    }
    ok(MPI_Win_fence(0, win), "MPI_Win_fence");
    /* Single-element accumulates: osc rdma makes each a network atomic. */
    int64_t add = 100 * (rank + 1);
    ok(MPI_Accumulate(&add, 1, MPI_INT64_T, 0, 1, 1, MPI_INT64_T, MPI_SUM, win), "MPI_Accumulate(SUM, 1)");
    ok(MPI_Win_fence(0, win), "MPI_Win_fence");
    if (rank == 0 && mem[1] != 31 + 300)
        fail("single-element MPI_Accumulate(SUM): %ld, want %d", (long)mem[1], 331);
    /* Fetch_and_op under a shared lock: both ranks add 1 to element 2, 100 times. */
    ok(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win), "MPI_Win_lock");
    int64_t inc = 1, old = 0, last = 2 + 30 - 1;
    for (int k = 0; k < 100; k++) {
        ok(MPI_Fetch_and_op(&inc, &old, MPI_INT64_T, 0, 2, MPI_SUM, win), "MPI_Fetch_and_op");
        ok(MPI_Win_flush(0, win), "MPI_Win_flush");
        /* What this rank fetches grows by at least its own increment. */
        if (old <= last || old > 2 + 30 + 199)
            fail("MPI_Fetch_and_op %d fetched %ld after %ld", k, (long)old, (long)last);
        last = old;
    }
    ok(MPI_Win_unlock(0, win), "MPI_Win_unlock");
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0 && own(2) != 2 + 30 + 200)
        fail("MPI_Fetch_and_op x200: %ld, want %d", (long)mem[2], 232);
    done();

    /* Compare_and_swap on the peer's element 3 (set to -1 here): a matching
     * compare swaps and returns the old value, a mismatching one returns the
     * current value and leaves it. Each rank targets its peer: a
     * compare-and-swap on the caller's own window segfaults inside Open MPI
     * 4.1.4's ofi BTL (mca_btl_ofi_acswap, a NULL pointer), on Debian's
     * libfabric as well. */
    start("compare_and_swap");
    mem[3] = -1;
    MPI_Barrier(MPI_COMM_WORLD);
    int64_t expect = -1, mine = 40 + rank, seen = 12345;
    ok(MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, win), "MPI_Win_lock");
    ok(MPI_Compare_and_swap(&mine, &expect, &seen, MPI_INT64_T, peer, 3, win), "MPI_Compare_and_swap");
    ok(MPI_Win_flush(peer, win), "MPI_Win_flush");
    if (seen != -1)
        fail("a matching compare-and-swap returned %ld, want -1", (long)seen);
    int64_t again = 99;
    ok(MPI_Compare_and_swap(&again, &expect, &seen, MPI_INT64_T, peer, 3, win), "MPI_Compare_and_swap");
    ok(MPI_Win_flush(peer, win), "MPI_Win_flush");
    if (seen != mine)
        fail("a mismatching compare-and-swap returned %ld, want %ld", (long)seen, (long)mine);
    int64_t next = 60 + rank;
    ok(MPI_Compare_and_swap(&next, &mine, &seen, MPI_INT64_T, peer, 3, win), "MPI_Compare_and_swap");
    ok(MPI_Win_unlock(peer, win), "MPI_Win_unlock");
    if (seen != mine)
        fail("the second matching compare-and-swap returned %ld, want %ld", (long)seen, (long)mine);
    MPI_Barrier(MPI_COMM_WORLD);
    if (own(3) != 60 + peer)
        fail("window element 3 after the peer's compare-and-swaps: %ld, want %d", (long)mem[3], 60 + peer);
    done();

    start("free");
    ok(MPI_Win_free(&win), "MPI_Win_free");
    free(mem);
    free(local);
    done();
    start("finalize");
    MPI_Finalize();
    if (rank == 0)
        printf("rma: all checks passed\n");
    return 0;
}
