/*
 * bench/udp_raw.c: the physical reference for the udp benchmarks: what a
 * plain UDP socket over loopback does on this machine, with no fabric
 * library in the way. bench/compare.sh compiles it at run time (cc -O2).
 *
 *   udp_raw pingpong server PORT [ITERS] [SIZE]   (pinned to cpu 0 by default)
 *   udp_raw pingpong client PORT [ITERS] [SIZE]   (pinned to cpu 1 by default)
 *   udp_raw stream   server PORT [ITERS] [SIZE]
 *   udp_raw stream   client PORT [ITERS] [SIZE]
 *
 * pingpong: SIZE-byte (default 8) datagram round trips, both sides
 *   busy-polling nonblocking sockets with sendto/recvfrom (as a fabric
 *   provider with manual progress spins); the client prints one-way
 *   latency: elapsed / ITERS / 2.
 * stream: the client sends ITERS datagrams of SIZE bytes (default 64000)
 *   to the server, which busy-polls, counts what arrives and discards it.
 *   UDP drops what a full receive buffer cannot take, so the figure is
 *   delivered bytes, not sent bytes: the server returns a credit (the
 *   count received so far) every CREDIT_EVERY datagrams and the client
 *   keeps at most a window of datagrams unaccounted for, the window being
 *   what the server's receive buffer holds (SO_RCVBUFFORCE when allowed,
 *   else SO_RCVBUF within net.core.rmem_max: the window is printed).
 *   A credit that stays away (a datagram lost all the same) does not stop
 *   the stream: after a short stall the client goes on, and what was lost
 *   is simply not counted. UDP_RAW_WINDOW caps the window (datagrams).
 *   At the end the client asks for the server's
 *   count until it answers; the client prints the bandwidth of the bytes
 *   the server received, from its first send to that answer, and how many
 *   datagrams were lost.
 *
 * Both modes start with a warm-up phase (pingpong: 1000 round trips;
 * stream: ITERS/20 + 1 datagrams, ended by the same count exchange) whose
 * figures are not printed. The client's last line is
 * "usec/xfer <usec> MB/sec <10^6 B/s>" (stream: usec per datagram).
 * Only 127.0.0.1; a 120 s alarm bounds every run. Set UDP_RAW_CPU to pin
 * elsewhere (-1: no pinning; the script also pins with taskset).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Control datagrams are shorter than any data datagram of the stream
 * (which has at least CTRL_MAX + 1 bytes) and start with a tag. */
enum { HELLO = 1, CREDIT = 2, END = 3, REPORT = 4 };
#define CTRL_MAX 32
#define CREDIT_EVERY 8
/* How long the client waits for a credit with a full window before it
 * counts the window as lost and goes on (long enough for a receiver that
 * lost the cpu for a few time slices: giving up early overflows its
 * buffer). */
#define STALL_SEC 0.05

struct ctrl {
	uint32_t tag;
	uint32_t phase;
	uint64_t count; /* datagrams received in this phase */
	uint64_t bytes; /* bytes received in this phase */
};

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
	const char *env = getenv("UDP_RAW_CPU");
	int cpu = env ? atoi(env) : (server ? 0 : 1);
	cpu_set_t set;
	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		die("sched_setaffinity");
}

static int retry(void)
{
	return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ENOBUFS;
}

/* Busy-polls until the datagram is sent. */
static void put(int fd, const void *p, size_t n, const struct sockaddr_in *to)
{
	for (;;) {
		ssize_t k = sendto(fd, p, n, 0, (const struct sockaddr *)to, sizeof(*to));
		if (k >= 0)
			return;
		if (!retry())
			die("sendto");
	}
}

/* One datagram if one is waiting: its length, or -1. Sets *from. */
static ssize_t poll_one(int fd, void *p, size_t n, struct sockaddr_in *from)
{
	socklen_t fl = sizeof(*from);
	ssize_t k = recvfrom(fd, p, n, 0, (struct sockaddr *)from, &fl);
	if (k < 0 && !retry() && errno != ECONNREFUSED)
		die("recvfrom");
	return k;
}

static void send_ctrl(int fd, uint32_t tag, uint32_t phase, uint64_t count, uint64_t bytes,
		      const struct sockaddr_in *to)
{
	struct ctrl c = { tag, phase, count, bytes };
	put(fd, &c, sizeof(c), to);
}

static int is_ctrl(const char *buf, ssize_t k, struct ctrl *c)
{
	if (k != (ssize_t)sizeof(*c))
		return 0;
	memcpy(c, buf, sizeof(*c));
	return 1;
}

/* The receive buffer the kernel granted (it reports about twice the bytes
 * it counts against datagrams). */
static int big_rcvbuf(int fd, int want)
{
	int got = 0;
	socklen_t l = sizeof(got);
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &want, sizeof(want)))
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof(want));
	if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got, &l))
		die("getsockopt SO_RCVBUF");
	return got;
}

/* Server side of one stream phase: counts data datagrams, returns credits,
 * answers END with the phase's count (also a repeated END of the phase
 * before, whose REPORT was lost). Returns when the client's next phase
 * starts sending or, after the last phase, when the client stops asking. */
static void stream_server(int fd, char *buf, size_t size, int phases)
{
	uint64_t count = 0, bytes = 0, last_count = 0, last_bytes = 0, every = CREDIT_EVERY;
	uint32_t phase = 0;
	double quiet_since = 0;
	for (;;) {
		struct sockaddr_in from;
		ssize_t k = poll_one(fd, buf, size, &from);
		struct ctrl c;
		if (k < 0) {
			if (phase == (uint32_t)phases && now() - quiet_since > 0.2)
				return;
			continue;
		}
		if (is_ctrl(buf, k, &c)) {
			if (c.tag == END && c.phase == phase && phase < (uint32_t)phases) {
				last_count = count;
				last_bytes = bytes;
				count = bytes = 0;
				phase++;
				send_ctrl(fd, REPORT, c.phase, last_count, last_bytes, &from);
			} else if (c.tag == END && c.phase + 1 == phase) {
				send_ctrl(fd, REPORT, c.phase, last_count, last_bytes, &from);
			} else if (c.tag == HELLO) {
				if (c.count > 0)
					every = c.count;
				send_ctrl(fd, HELLO, 0, 0, 0, &from);
			}
			quiet_since = now();
			continue;
		}
		if (k <= CTRL_MAX)
			continue;
		count++;
		bytes += (uint64_t)k;
		if (count % every == 0)
			send_ctrl(fd, CREDIT, phase, count, 0, &from);
	}
}

/* Client side of one stream phase: n datagrams within the window, then
 * END until the REPORT. Returns the REPORT; *stalls counts windows given
 * up on. */
static struct ctrl stream_phase(int fd, char *buf, size_t size, long n, long window, uint32_t phase,
				const struct sockaddr_in *to, long *stalls)
{
	uint64_t credited = 0;
	long sent = 0;
	double wait_since = 0;
	struct ctrl c;
	struct sockaddr_in from;
	char in[64];
	while (sent < n) {
		ssize_t k;
		while ((k = poll_one(fd, in, sizeof(in), &from)) >= 0) {
			if (is_ctrl(in, k, &c) && c.tag == CREDIT && c.phase == phase && c.count > credited)
				credited = c.count;
		}
		if ((uint64_t)sent - credited >= (uint64_t)window) {
			double t = now();
			if (wait_since == 0) {
				wait_since = t;
			} else if (t - wait_since > STALL_SEC) {
				/* Lost all the same: count it as delivered for the window. */
				credited = (uint64_t)sent;
				(*stalls)++;
				wait_since = 0;
			}
			continue;
		}
		wait_since = 0;
		put(fd, buf, size, to);
		sent++;
	}
	double asked = 0;
	for (;;) {
		double t = now();
		if (t - asked > 0.001) {
			send_ctrl(fd, END, phase, 0, 0, to);
			asked = t;
		}
		ssize_t k = poll_one(fd, in, sizeof(in), &from);
		if (k >= 0 && is_ctrl(in, k, &c) && c.tag == REPORT && c.phase == phase)
			return c;
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
		fprintf(stderr, "udp_raw: bad mode %s %s\n", argv[1], argv[2]);
		return 2;
	}
	int port = atoi(argv[3]);
	long iters = argc > 4 ? atol(argv[4]) : (stream ? 5000 : 200000);
	size_t size = argc > 5 ? (size_t)atol(argv[5]) : (stream ? 64000 : 8);
	long warm = stream ? iters / 20 + 1 : 1000;
	if (port <= 0 || port > 65535 || iters <= 0 || size == 0 || size > 65507 ||
	    (stream && size <= CTRL_MAX) || (!stream && size == sizeof(struct ctrl)))
		return 2;
	alarm(120);
	pin(server);

	struct sockaddr_in sa, peer;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons(port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	peer = sa;
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0)
		die("socket");
	if (server && bind(fd, (struct sockaddr *)&sa, sizeof(sa)))
		die("bind");
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK))
		die("O_NONBLOCK");
	int rcvbuf = big_rcvbuf(fd, 32 << 20);

	char *buf = malloc(size > 64 ? size : 64);
	if (!buf)
		die("malloc");
	memset(buf, 0x5a, size);

	/* The stream's window: half of what the server's receive buffer
	 * holds, taken to be what this side was granted (same privileges).
	 * The kernel reports about twice what it counts, and counts a
	 * datagram's buffer, which may be up to twice its size. Credits come
	 * at least four times per window. UDP_RAW_WINDOW caps it. */
	long window = (long)(rcvbuf / 2) / (long)(2 * size + 4096) / 2;
	if (getenv("UDP_RAW_WINDOW") && atol(getenv("UDP_RAW_WINDOW")) > 0 &&
	    atol(getenv("UDP_RAW_WINDOW")) < window)
		window = atol(getenv("UDP_RAW_WINDOW"));
	if (window < 2)
		window = 2;
	long credit_every = window / 4 < CREDIT_EVERY ? window / 4 : CREDIT_EVERY;
	if (credit_every < 1)
		credit_every = 1;

	if (!server) {
		/* The server may not be bound yet: HELLO (with the credit
		 * interval) until it answers. */
		double asked = 0;
		for (;;) {
			double t = now();
			struct ctrl c;
			struct sockaddr_in from;
			if (t - asked > 0.01) {
				send_ctrl(fd, HELLO, 0, (uint64_t)credit_every, 0, &sa);
				asked = t;
			}
			ssize_t k = poll_one(fd, buf, 64, &from);
			if (k >= 0 && is_ctrl(buf, k, &c) && c.tag == HELLO)
				break;
		}
	}

	if (!stream) {
		if (server) {
			/* Learn the client from its HELLO (answered), then serve. */
			struct ctrl c;
			ssize_t k;
			do {
				k = poll_one(fd, buf, 64, &peer);
			} while (!(k >= 0 && is_ctrl(buf, k, &c) && c.tag == HELLO));
			send_ctrl(fd, HELLO, 0, 0, 0, &peer);
		}
		double t0 = 0;
		for (long i = 0; i < warm + iters; i++) {
			struct sockaddr_in from;
			ssize_t k;
			if (i == warm)
				t0 = now();
			if (!server)
				put(fd, buf, size, &peer);
			/* A repeated HELLO answer is not the reply. */
			do {
				k = poll_one(fd, buf, size > 64 ? size : 64, &from);
			} while (k != (ssize_t)size);
			if (server)
				put(fd, buf, size, &peer);
		}
		double dt = now() - t0;
		if (!server) {
			double usec = dt * 1e6 / iters / 2;
			printf("pingpong %zu B x %ld: usec/xfer %.4f MB/sec %.2f\n", size, iters, usec,
			       size / usec);
		}
	} else if (server) {
		stream_server(fd, buf, size, 2);
	} else {
		long stalls = 0;
		struct ctrl r = stream_phase(fd, buf, size, warm, window, 0, &sa, &stalls);
		stalls = 0;
		double t0 = now();
		r = stream_phase(fd, buf, size, iters, window, 1, &sa, &stalls);
		double dt = now() - t0;
		double mbs = (double)r.bytes / dt / 1e6;
		printf("stream %zu B x %ld: window %ld datagrams, credit every %ld; delivered %llu (%ld lost), %ld stalls\n",
		       size, iters, window, credit_every, (unsigned long long)r.count,
		       iters - (long)r.count, stalls);
		printf("stream %zu B x %ld: usec/xfer %.4f MB/sec %.2f\n", size, iters,
		       r.count ? dt * 1e6 / (double)r.count : 0.0, mbs);
	}
	close(fd);
	free(buf);
	return 0;
}
