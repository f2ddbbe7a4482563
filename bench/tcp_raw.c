/*
 * bench/tcp_raw.c: the physical reference for the tcp benchmarks: what a
 * plain TCP socket over loopback does on this machine, with no fabric
 * library in the way. bench/compare.sh compiles it at run time (cc -O2).
 *
 *   tcp_raw pingpong server PORT [ITERS] [SIZE]   (pinned to cpu 0 by default)
 *   tcp_raw pingpong client PORT [ITERS] [SIZE]   (pinned to cpu 1 by default)
 *   tcp_raw stream   server PORT [ITERS] [SIZE]
 *   tcp_raw stream   client PORT [ITERS] [SIZE]
 *
 * pingpong: SIZE-byte (default 8) round trips, both sides busy-polling
 *   nonblocking sockets with TCP_NODELAY (as a fabric provider with manual
 *   progress spins); the client prints one-way latency: elapsed / ITERS / 2.
 * stream: the client writes ITERS buffers of SIZE bytes (default 1 MiB)
 *   as fast as the socket takes them, the server reads and discards them
 *   (busy-polling) and answers one byte at the end; the client prints the
 *   bandwidth from its first write to that answer.
 *
 * The client's last line is "usec/xfer <one-way usec> MB/sec <10^6 B/s>".
 * Only 127.0.0.1; a 120 s alarm bounds every run. Set TCP_RAW_CPU to pin
 * elsewhere (-1: no pinning; the script also pins with taskset).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <arpa/inet.h>

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void pin(int server)
{
	const char *env = getenv("TCP_RAW_CPU");
	int cpu = env ? atoi(env) : (server ? 0 : 1);
	cpu_set_t set;
	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		die("sched_setaffinity");
}

static void setup(int fd)
{
	int one = 1;
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)))
		die("TCP_NODELAY");
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK))
		die("O_NONBLOCK");
}

/* Busy-polls until all n bytes are written. */
static void put(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
		if (k > 0) {
			p += k;
			n -= k;
		} else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			die("send");
		}
	}
}

/* Busy-polls until n bytes are read. */
static void get(int fd, char *p, size_t n)
{
	while (n) {
		ssize_t k = recv(fd, p, n, 0);
		if (k > 0) {
			p += k;
			n -= k;
		} else if (k == 0) {
			fprintf(stderr, "tcp_raw: peer closed early\n");
			exit(1);
		} else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			die("recv");
		}
	}
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: %s pingpong|stream server|client PORT [ITERS] [SIZE]\n", argv[0]);
		return 2;
	}
	int stream = !strcmp(argv[1], "stream");
	int server = !strcmp(argv[2], "server");
	if ((!stream && strcmp(argv[1], "pingpong")) || (!server && strcmp(argv[2], "client"))) {
		fprintf(stderr, "tcp_raw: bad mode %s %s\n", argv[1], argv[2]);
		return 2;
	}
	int port = atoi(argv[3]);
	long iters = argc > 4 ? atol(argv[4]) : (stream ? 5000 : 200000);
	size_t size = argc > 5 ? (size_t)atol(argv[5]) : (stream ? 1 << 20 : 8);
	long warm = stream ? iters / 20 + 1 : 1000;
	if (port <= 0 || port > 65535 || iters <= 0 || size == 0)
		return 2;
	alarm(120);
	pin(server);

	struct sockaddr_in sa;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons(port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd;
	if (server) {
		int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
		if (l < 0)
			die("socket");
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) || listen(l, 1))
			die("bind/listen");
		fd = accept(l, NULL, NULL);
		if (fd < 0)
			die("accept");
		close(l);
	} else {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0)
			die("socket");
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
			die("connect");
	}
	setup(fd);

	char *buf = malloc(size);
	if (!buf)
		die("malloc");
	memset(buf, 0x5a, size);
	char ack = 0;
	double t0 = 0, dt;

	if (!stream) {
		for (long i = 0; i < warm + iters; i++) {
			if (i == warm)
				t0 = now();
			if (server) {
				get(fd, buf, size);
				put(fd, buf, size);
			} else {
				put(fd, buf, size);
				get(fd, buf, size);
			}
		}
		dt = now() - t0;
		if (!server) {
			double usec = dt * 1e6 / iters / 2;
			printf("pingpong %zu B x %ld: usec/xfer %.4f MB/sec %.2f\n", size, iters, usec,
			       size / usec);
		}
	} else {
		/* Warm-up transfers, then a one-byte handshake, then the timed part. */
		for (int phase = 0; phase < 2; phase++) {
			long n = phase ? iters : warm;
			if (phase && !server)
				t0 = now();
			for (long i = 0; i < n; i++) {
				if (server)
					get(fd, buf, size);
				else
					put(fd, buf, size);
			}
			if (server)
				put(fd, &ack, 1);
			else
				get(fd, &ack, 1);
		}
		dt = now() - t0;
		if (!server) {
			double mbs = (double)size * iters / dt / 1e6;
			printf("stream %zu B x %ld: usec/xfer %.4f MB/sec %.2f\n", size, iters,
			       dt * 1e6 / iters, mbs);
		}
	}
	close(fd);
	free(buf);
	return 0;
}
