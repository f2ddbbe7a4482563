/*
 * memcpy.c: single-thread memcpy bandwidth, the reference for the 1 MiB
 * ping-pong bandwidth target in bench/compare.sh.
 *
 * Usage: memcpy [SIZE_BYTES [COPIES [REPS]]]   (defaults: 1048576 2000 7)
 *
 * Copies SIZE bytes with libc memcpy, alternating a->b and b->a the way a
 * ping-pong moves a message to the peer and back, COPIES times per rep.
 * Counts bandwidth the way fi_pingpong does: bytes moved per microsecond
 * (MB/s with MB = 10^6 bytes). Prints the median over REPS reps:
 *   memcpy <size> bytes: <MB/s> MB/sec (median of <reps>)
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	size_t size = argc > 1 ? strtoull(argv[1], NULL, 0) : 1048576;
	long copies = argc > 2 ? strtol(argv[2], NULL, 0) : 2000;
	int reps = argc > 3 ? atoi(argv[3]) : 7;
	if (size == 0 || copies <= 0 || reps <= 0 || reps > 1000) {
		fprintf(stderr, "usage: %s [SIZE_BYTES [COPIES [REPS]]]\n", argv[0]);
		return 2;
	}

	unsigned char *a, *b;
	if (posix_memalign((void **)&a, 4096, size) || posix_memalign((void **)&b, 4096, size)) {
		perror("posix_memalign");
		return 1;
	}
	memset(a, 0x5a, size);
	memset(b, 0xa5, size);

	double *mbs = calloc(reps, sizeof(*mbs));
	if (!mbs)
		return 1;

	/* Warm up: fault the pages in and fill the caches. */
	for (int i = 0; i < 10; i++) {
		memcpy(b, a, size);
		memcpy(a, b, size);
	}

	for (int r = 0; r < reps; r++) {
		double t0 = now_us();
		for (long i = 0; i < copies; i++) {
			if (i & 1)
				memcpy(a, b, size);
			else
				memcpy(b, a, size);
			/* Keep the compiler from merging or dropping copies. */
			__asm__ __volatile__("" : : "r"(a), "r"(b) : "memory");
		}
		double dt = now_us() - t0;
		mbs[r] = (double)size * (double)copies / dt;
	}

	qsort(mbs, reps, sizeof(*mbs), cmp_double);
	double med = reps & 1 ? mbs[reps / 2] : (mbs[reps / 2 - 1] + mbs[reps / 2]) / 2;
	printf("memcpy %zu bytes: %.2f MB/sec (median of %d)\n", size, med, reps);
	free(mbs);
	free(a);
	free(b);
	return 0;
}
