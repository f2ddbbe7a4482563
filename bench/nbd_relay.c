/*
 * bench/nbd_relay.c: the physical reference for bench/storage.sh. The
 * storage benchmark's ofi path is client -> Unix socket -> gateway process
 * -> one TCP hop -> target process -> file. This program is the least any
 * such layout can do: a byte relay with no protocol of its own, between a
 * Unix socket and a TCP connection to nbdkit, so fio -> relay -> nbdkit
 * moves every byte through the same kernel paths and the same number of
 * processes (and user-space copies) as fio -> ofi gateway -> ofi target.
 *
 *   nbd_relay UNIX_SOCKET_PATH TCP_PORT
 *
 * Listens on UNIX_SOCKET_PATH; for each client it forks, connects to
 * 127.0.0.1:TCP_PORT and copies bytes both ways (one thread, nonblocking
 * sockets, poll(2) sleeps, 256 KiB per direction, TCP_NODELAY) until
 * either side closes. Only 127.0.0.1. bench/storage.sh compiles it at run
 * time (cc -O2) and kills it at the end.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define BUF (256 * 1024)

struct dir {
    int from, to;
    char *buf;
    size_t off, len;
    int eof;
};

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static void nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        die("fcntl");
}

/* Moves what it can without blocking; -1 when the connection is over. */
static int pump(struct dir *d)
{
    for (;;) {
        if (d->len == 0 && !d->eof) {
            ssize_t n = read(d->from, d->buf, BUF);
            if (n == 0) {
                d->eof = 1;
            } else if (n < 0) {
                if (errno == EAGAIN || errno == EINTR)
                    return 0;
                return -1;
            } else {
                d->off = 0;
                d->len = (size_t)n;
            }
        }
        if (d->len == 0)
            return d->eof ? -1 : 0;
        ssize_t w = write(d->to, d->buf + d->off, d->len);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return 0;
            return -1;
        }
        d->off += (size_t)w;
        d->len -= (size_t)w;
    }
}

static void serve(int client, int port)
{
    int up = socket(AF_INET, SOCK_STREAM, 0);
    if (up < 0)
        die("socket");
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(up, (struct sockaddr *)&a, sizeof a) < 0)
        die("connect");
    int one = 1;
    setsockopt(up, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    nonblock(up);
    nonblock(client);
    struct dir d[2] = {
        {client, up, malloc(BUF), 0, 0, 0},
        {up, client, malloc(BUF), 0, 0, 0},
    };
    if (!d[0].buf || !d[1].buf)
        die("malloc");
    for (;;) {
        for (int i = 0; i < 2; i++)
            if (pump(&d[i]) < 0)
                exit(0);
        struct pollfd p[2] = {{client, 0, 0}, {up, 0, 0}};
        for (int i = 0; i < 2; i++) {
            /* Wait to read into an empty buffer, or to write a full one. */
            struct pollfd *src = &p[i], *dst = &p[1 - i];
            if (d[i].len == 0)
                src->events |= POLLIN;
            else
                dst->events |= POLLOUT;
        }
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            die("poll");
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: nbd_relay UNIX_SOCKET_PATH TCP_PORT\n");
        return 2;
    }
    int port = atoi(argv[2]);
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    if (l < 0)
        die("socket");
    struct sockaddr_un u = {0};
    u.sun_family = AF_UNIX;
    if (strlen(argv[1]) >= sizeof u.sun_path) {
        fprintf(stderr, "nbd_relay: socket path too long\n");
        return 2;
    }
    strcpy(u.sun_path, argv[1]);
    unlink(argv[1]);
    if (bind(l, (struct sockaddr *)&u, sizeof u) < 0 || listen(l, 16) < 0)
        die("bind/listen");
    signal(SIGCHLD, SIG_IGN);
    for (;;) {
        int c = accept(l, NULL, NULL);
        if (c < 0) {
            if (errno == EINTR)
                continue;
            die("accept");
        }
        pid_t pid = fork();
        if (pid < 0)
            die("fork");
        if (pid == 0) {
            close(l);
            serve(c, port);
        }
        close(c);
    }
}
