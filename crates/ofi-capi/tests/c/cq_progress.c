/* Item 11 of issue 16: fi_cq_read(cq, NULL, 0) drives progress without
 * taking entries: -FI_EAGAIN while nothing is queued, 0 once something is.
 * Usage: cq_progress PROV (tcp or shm). */
#include "common.h"

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp";
	struct loop l;
	static char out[32] = "progress", in[32];
	struct fi_cq_entry e[4];
	int r;

	start();
	r = loop_open(&l, prov, FI_MSG, NULL);
	CHECK("loop endpoint", r == 0);
	if (r)
		return finish();
	SAME("read(NULL, 0) when empty: %zd", fi_cq_read(l.cq, NULL, 0));
	SAME("read(buf, 0) when empty: %zd", fi_cq_read(l.cq, e, 0));
	CHECK("recv posted", RETRY(&l, fi_recv(l.ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, (void *)1)) == 0);
	CHECK("send posted", RETRY(&l, fi_send(l.ep, out, sizeof out, NULL, l.self, (void *)2)) == 0);
	/* Only fi_cq_read(cq, NULL, 0) runs until the message has arrived. */
	ssize_t n = -FI_EAGAIN;
	for (double end = now_s() + 10; strcmp(in, "progress") && now_s() < end;)
		n = fi_cq_read(l.cq, NULL, 0);
	CHECK("the message arrived by read(NULL, 0) calls alone", !strcmp(in, "progress"));
	for (double end = now_s() + 10; n == -FI_EAGAIN && now_s() < end;)
		n = fi_cq_read(l.cq, NULL, 0);
	SAME("read(NULL, 0) once completions are queued: %zd", n);
	CHECK("read(NULL, 0) took no entry", loop_complete(&l, 2) == 2);
	SAME("read(NULL, 0) when drained: %zd", fi_cq_read(l.cq, NULL, 0));
	/* Negative: a NULL buffer with room for entries. libfabric 1.17 does
	 * not check it (-FI_EAGAIN on an empty queue, a crash on a full one). */
	CHECK_OFI("read(NULL, 1) is -FI_EINVAL", fi_cq_read(l.cq, NULL, 1) == -FI_EINVAL);
	loop_close(&l);
	return finish();
}
