/*
 * hello_fabric.c: a plain libfabric program, built against the system's
 * libfabric headers (<rdma/fabric.h> …, Debian's libfabric-dev) and run on
 * ofi's libfabric.so.1.
 *
 * Two processes (this one and a forked child) each open a fabric, a domain,
 * a completion queue, an address vector and a reliable-datagram endpoint on
 * the provider named on the command line, swap endpoint addresses over a
 * pipe, send each other a short greeting and a 1 MiB patterned message,
 * check every byte, close everything and exit 0.
 *
 * Build and run it on ofi's library (from the repository root):
 *
 *   cargo build --release -p ofi-capi
 *   ln -sf libfabric.so target/release/libfabric.so.1
 *   cc -O2 -Wall -o target/release/hello_fabric examples/c/hello_fabric.c \
 *       -Ltarget/release -lfabric -Wl,-rpath,"$PWD/target/release" \
 *       -Wl,--disable-new-dtags
 *   target/release/hello_fabric shm
 *   target/release/hello_fabric tcp
 *
 * -lfabric finds ofi's target/release/libfabric.so before the system's; the
 * program records that library's SONAME, libfabric.so.1, and the rpath
 * makes the loader take it from target/release (the symlink), even when an
 * LD_LIBRARY_PATH names a directory holding the system's libfabric.so.1
 * (--disable-new-dtags writes a DT_RPATH, which the loader searches before
 * LD_LIBRARY_PATH; the default DT_RUNPATH comes after it). Built with
 * plain `cc hello_fabric.c -lfabric`, the same program runs on the system's
 * libfabric. scripts/test.sh builds and runs it so (stage capi:example).
 */
#include <errno.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BIG_SIZE (1 << 20)
#define TIMEOUT_SECONDS 20

static const char *who = "parent";

/* Prints what failed and exits nonzero. */
__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "hello_fabric (%s): ", who);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

/* Dies with fi_strerror's text unless a libfabric call returned 0. */
static void check(int ret, const char *call)
{
    if (ret)
        die("%s failed: %d (%s)", call, ret, fi_strerror(-ret));
}

/* Everything one process opens, in the order it opens it. */
struct node {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_cq *cq;
    struct fid_av *av;
    struct fid_ep *ep;
    fi_addr_t peer;
};

/* Asks for a reliable-datagram endpoint with send/receive on `prov`, on
 * loopback, then opens the objects and enables the endpoint. */
static void open_node(struct node *n, const char *prov)
{
    struct fi_info *hints = fi_allocinfo();
    if (!hints)
        die("fi_allocinfo failed");
    hints->caps = FI_MSG;
    hints->ep_attr->type = FI_EP_RDM;
    hints->fabric_attr->prov_name = strdup(prov);
    /* A node with FI_SOURCE names the local address: loopback for tcp (the
     * port is picked when the endpoint binds). shm needs no node. */
    const char *node = strcmp(prov, "tcp") == 0 ? "127.0.0.1" : NULL;
    check(fi_getinfo(FI_VERSION(1, 17), node, NULL, node ? FI_SOURCE : 0, hints, &n->info), "fi_getinfo");
    fi_freeinfo(hints); /* frees prov_name too */
    printf("%s: provider %s, fabric %s, domain %s\n", who, n->info->fabric_attr->prov_name,
           n->info->fabric_attr->name, n->info->domain_attr->name);

    check(fi_fabric(n->info->fabric_attr, &n->fabric, NULL), "fi_fabric");
    check(fi_domain(n->fabric, n->info, &n->domain, NULL), "fi_domain");

    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_NONE};
    check(fi_cq_open(n->domain, &cq_attr, &n->cq, NULL), "fi_cq_open");

    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    check(fi_av_open(n->domain, &av_attr, &n->av, NULL), "fi_av_open");

    check(fi_endpoint(n->domain, n->info, &n->ep, NULL), "fi_endpoint");
    check(fi_ep_bind(n->ep, &n->cq->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)");
    check(fi_ep_bind(n->ep, &n->av->fid, 0), "fi_ep_bind(av)");
    check(fi_enable(n->ep), "fi_enable");
}

/* Sends this endpoint's address down `out`, reads the peer's from `in` and
 * inserts it into the address vector. */
static void swap_addresses(struct node *n, int out, int in)
{
    char addr[256], peer[256];
    size_t len = sizeof addr;
    check(fi_getname(&n->ep->fid, addr, &len), "fi_getname");
    if (write(out, &len, sizeof len) != sizeof len || write(out, addr, len) != (ssize_t)len)
        die("writing the address to the pipe: %s", strerror(errno));

    size_t peer_len = 0;
    if (read(in, &peer_len, sizeof peer_len) != sizeof peer_len || peer_len > sizeof peer ||
        read(in, peer, peer_len) != (ssize_t)peer_len)
        die("reading the peer's address from the pipe");
    if (fi_av_insert(n->av, peer, 1, &n->peer, 0, NULL) != 1)
        die("fi_av_insert did not insert the peer's address");

    char text[256];
    size_t text_len = sizeof text;
    fi_av_straddr(n->av, peer, text, &text_len);
    printf("%s: peer at %s\n", who, text);
}

/* Reads the error entry that fi_cq_read announced with -FI_EAVAIL and
 * dies with the provider's description of it. */
__attribute__((noreturn)) static void die_cq_error(struct node *n)
{
    struct fi_cq_err_entry err = {0};
    if (fi_cq_readerr(n->cq, &err, 0) != 1)
        die("fi_cq_read reported an error but fi_cq_readerr has none");
    die("operation failed: %s (%s)", fi_strerror(err.err),
        fi_cq_strerror(n->cq, err.prov_errno, err.err_data, NULL, 0));
}

/* Posts a receive of `len` bytes and a send of `msg`, waits for both, and
 * checks that the receive took exactly `len` bytes. */
static void exchange(struct node *n, void *msg, void *recv_buf, size_t len)
{
    struct fi_context send_ctx, recv_ctx;
    check((int)fi_recv(n->ep, recv_buf, len, NULL, n->peer, &recv_ctx), "fi_recv");
    ssize_t ret;
    while ((ret = fi_send(n->ep, msg, len, NULL, n->peer, &send_ctx)) == -FI_EAGAIN)
        (void)fi_cq_read(n->cq, NULL, 0); /* drive progress, then retry */
    check((int)ret, "fi_send");

    /* Poll until both have completed, in whichever order they do. */
    int sent = 0, received = 0;
    time_t deadline = time(NULL) + TIMEOUT_SECONDS;
    while (!sent || !received) {
        struct fi_cq_msg_entry entry;
        ssize_t got = fi_cq_read(n->cq, &entry, 1);
        if (got == 1 && entry.op_context == &send_ctx) {
            sent = 1;
        } else if (got == 1 && entry.op_context == &recv_ctx) {
            if (!(entry.flags & FI_RECV) || entry.len != len)
                die("receive completion: flags %#llx, len %zu (want FI_RECV, %zu)",
                    (unsigned long long)entry.flags, entry.len, len);
            received = 1;
        } else if (got == 1) {
            die("unexpected completion (context %p)", entry.op_context);
        } else if (got == -FI_EAVAIL) {
            die_cq_error(n);
        } else if (got != -FI_EAGAIN) {
            check((int)got, "fi_cq_read");
        }
        if (time(NULL) > deadline)
            die("exchange of %zu bytes did not complete within %d s", len, TIMEOUT_SECONDS);
    }
}

/* The byte at offset i of the big message `from` (0: parent, 1: child) sends. */
static unsigned char pattern(size_t i, int from)
{
    return (unsigned char)(i * 7 + (i >> 12) + from * 101);
}

/* Closes every object in the reverse order of opening. */
static void close_node(struct node *n)
{
    check(fi_close(&n->ep->fid), "fi_close(ep)");
    check(fi_close(&n->av->fid), "fi_close(av)");
    check(fi_close(&n->cq->fid), "fi_close(cq)");
    check(fi_close(&n->domain->fid), "fi_close(domain)");
    check(fi_close(&n->fabric->fid), "fi_close(fabric)");
    fi_freeinfo(n->info);
}

/* One side of the conversation; `me` is 0 in the parent, 1 in the child. */
static void run(const char *prov, int me, int out, int in)
{
    struct node n;
    open_node(&n, prov);
    swap_addresses(&n, out, in);

    /* A greeting each way. */
    char hello[64] = {0}, got[64] = {0};
    snprintf(hello, sizeof hello, "hello from the %s", who);
    exchange(&n, hello, got, sizeof hello);
    const char *want = me == 0 ? "hello from the child" : "hello from the parent";
    if (strcmp(got, want) != 0)
        die("received \"%.63s\", want \"%s\"", got, want);
    printf("%s: received \"%s\"\n", who, got);

    /* 1 MiB each way, every byte checked. */
    unsigned char *big = malloc(BIG_SIZE), *back = calloc(1, BIG_SIZE);
    if (!big || !back)
        die("out of memory");
    for (size_t i = 0; i < BIG_SIZE; i++)
        big[i] = pattern(i, me);
    exchange(&n, big, back, BIG_SIZE);
    for (size_t i = 0; i < BIG_SIZE; i++) {
        if (back[i] != pattern(i, 1 - me))
            die("byte %zu of the 1 MiB message is %u, want %u", i, back[i], pattern(i, 1 - me));
    }
    printf("%s: received %d bytes intact\n", who, BIG_SIZE);
    free(big);
    free(back);

    /* Neither side closes while the other may still need its endpoint:
     * one byte each way over the pipes says "done". */
    char done = 'd';
    if (write(out, &done, 1) != 1 || read(in, &done, 1) != 1)
        die("pipe handshake before closing");
    close_node(&n);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PROVIDER   (shm or tcp)\n", argv[0]);
        return 2;
    }
    printf("libfabric API %u.%u\n", FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
    fflush(stdout);

    int to_child[2], to_parent[2];
    if (pipe(to_child) || pipe(to_parent))
        die("pipe: %s", strerror(errno));
    pid_t child = fork();
    if (child < 0)
        die("fork: %s", strerror(errno));
    if (child == 0) {
        who = "child";
        run(argv[1], 1, to_parent[1], to_child[0]);
        return 0;
    }
    run(argv[1], 0, to_child[1], to_parent[0]);

    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("the child failed (status %#x)", status);
    printf("hello_fabric: %s ok\n", argv[1]);
    return 0;
}
