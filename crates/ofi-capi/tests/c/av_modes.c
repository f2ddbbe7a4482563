/* Address vector behaviour fi_av(3) states, on tcp (FI_SOCKADDR_IN):
 * - FI_AV_UNSPEC: the type chosen comes back through the attributes;
 * - FI_AV_TABLE: an insert takes the lowest unused index;
 * - FI_EVENT: inserts before fi_av_bind fail with -FI_ENOEQ; after it
 *   they return 0 and the EQ gets an error entry per failed address (its
 *   index in data) and then FI_AV_COMPLETE with the count inserted, the
 *   insert's context in each;
 * - FI_SYNC_ERR on fi_av_insertsvc and fi_av_insertsym fills the status
 *   array, and fi_av_insertsym counts up a host name's numeric suffix;
 * - fi_getname with a short buffer copies what fits (fi_cm(3)).
 * Usage: av_modes. */
#include "common.h"
#include <arpa/inet.h>
#include <netinet/in.h>

static struct sockaddr_in at(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	return a;
}

int main(void)
{
	start();
	struct loop l;
	int r = loop_open(&l, "tcp", FI_MSG, NULL);
	CHECK("loop endpoint", r == 0);
	if (r)
		return finish();

	/* FI_AV_UNSPEC comes back as the type in force. */
	struct fi_av_attr ua = { .type = FI_AV_UNSPEC };
	struct fid_av *av;
	CHECK("av open (FI_AV_UNSPEC)", fi_av_open(l.dom, &ua, &av, NULL) == 0);
	CHECK("the type chosen is written back", ua.type == FI_AV_TABLE || ua.type == FI_AV_MAP);
	SAME("av type %d", (int)ua.type);

	/* The lowest unused index. */
	struct sockaddr_in four[4];
	for (int i = 0; i < 4; i++)
		four[i] = at(7100 + i);
	fi_addr_t fa[4];
	SAME("insert four %d", fi_av_insert(av, four, 4, fa, 0, NULL));
	SAME("their indices %llu %llu %llu %llu", (unsigned long long)fa[0], (unsigned long long)fa[1],
	     (unsigned long long)fa[2], (unsigned long long)fa[3]);
	if (ua.type == FI_AV_TABLE) {
		fi_addr_t rm[2] = { fa[1], fa[3] };
		SAME("remove two %d", fi_av_remove(av, rm, 2, 0));
		struct sockaddr_in one = at(7200);
		fi_addr_t x = FI_ADDR_NOTAVAIL;
		SAME("insert one %d", fi_av_insert(av, &one, 1, &x, 0, NULL));
		CHECK("it takes the lowest unused index", x == fa[1]);
	}
	CHECK("av close", fi_close(&av->fid) == 0);

	/* FI_EVENT. */
	struct fi_eq_attr ea = { .size = 16, .wait_obj = FI_WAIT_UNSPEC };
	struct fid_eq *eq;
	CHECK("eq open", fi_eq_open(l.fab, &ea, &eq, NULL) == 0);
	struct fi_av_attr ta = { .type = FI_AV_TABLE, .flags = FI_EVENT };
	CHECK("av open (FI_EVENT)", fi_av_open(l.dom, &ta, &av, NULL) == 0);
	struct sockaddr_in two[3] = { at(7300), at(7301) };
	/* The third is no address: an unknown family. */
	memset(&two[2], 0x77, sizeof two[2]);
	fi_addr_t ev_fa[3];
	/* libfabric 1.17 inserts without an EQ (its manual: -FI_ENOEQ). */
	CHECK_OFI("an insert before fi_av_bind is -FI_ENOEQ",
		  fi_av_insert(av, two, 2, ev_fa, 0, NULL) == -FI_ENOEQ);
	SAME("av bind eq %d", fi_av_bind(av, &eq->fid, 0));
	int ctx;
	SAME("asynchronous insert %d", fi_av_insert(av, two, 3, ev_fa, 0, &ctx));
	CHECK("the failed address is FI_ADDR_NOTAVAIL", ev_fa[2] == FI_ADDR_NOTAVAIL);
	uint32_t event = 0;
	struct fi_eq_entry e = { 0 };
	ssize_t n = fi_eq_sread(eq, &event, &e, sizeof e, 2000, 0);
	SAME("first read %zd", n);
	if (n == -FI_EAVAIL) {
		struct fi_eq_err_entry ee = { 0 };
		SAME("error entry %zd", fi_eq_readerr(eq, &ee, 0));
		SAME("error for address %llu", (unsigned long long)ee.data);
		CHECK("the error entry names the insert", ee.context == &ctx && ee.err != 0);
		n = fi_eq_sread(eq, &event, &e, sizeof e, 2000, 0);
	}
	SAME("completion %zd event %u data %llu", n, event, (unsigned long long)e.data);
	CHECK("FI_AV_COMPLETE with the count inserted and the insert's context",
	      n == (ssize_t)sizeof e && event == FI_AV_COMPLETE && e.data == 2 && e.context == &ctx);
	/* libfabric 1.17 closes an EQ an AV is bound to. */
	CHECK_OFI("an EQ bound to an AV does not close", fi_close(&eq->fid) == -FI_EBUSY);
	/* An empty insert is reported too (one completion per insert), and
	 * FI_SYNC_ERR does not apply: context is the event's, never written
	 * as a status array. */
	int ctxs[4] = { 7, 7, 7, 7 };
	SAME("empty asynchronous insert %d", fi_av_insert(av, two, 0, ev_fa, 0, &ctxs[0]));
	{
		ssize_t m = fi_eq_sread(eq, &event, &e, sizeof e, 2000, 0);
		CHECK_OFI("FI_AV_COMPLETE for an empty insert",
			  m == (ssize_t)sizeof e && event == FI_AV_COMPLETE && e.data == 0 && e.context == &ctxs[0]);
	}
	SAME("asynchronous insert with FI_SYNC_ERR %d", fi_av_insert(av, two, 2, ev_fa, FI_SYNC_ERR, &ctxs[0]));
	CHECK("the event context is not written as statuses",
	      ctxs[0] == 7 && ctxs[1] == 7 && ctxs[2] == 7 && ctxs[3] == 7);
	/* Reports still queued go with a closed AV (they would name it). */
	SAME("another asynchronous insert %d", fi_av_insert(av, two, 2, ev_fa, 0, &ctx));
	CHECK("av close", fi_close(&av->fid) == 0);
	CHECK_OFI("no report names the closed AV", fi_eq_read(eq, &event, &e, sizeof e, 0) == -FI_EAGAIN);
	CHECK("eq close", fi_close(&eq->fid) == 0);

	/* FI_SYNC_ERR on insertsvc and insertsym. */
	struct fi_av_attr sa = { .type = FI_AV_TABLE };
	CHECK("av open", fi_av_open(l.dom, &sa, &av, NULL) == 0);
	int st[4] = { -1, -1, -1, -1 };
	fi_addr_t sv = FI_ADDR_NOTAVAIL;
	SAME("insertsvc %d", fi_av_insertsvc(av, "127.0.0.1", "7400", &sv, FI_SYNC_ERR, st));
	/* libfabric 1.17 leaves the status array alone here. */
	CHECK_OFI("insertsvc writes its status", st[0] == 0 && sv != FI_ADDR_NOTAVAIL);
	fi_addr_t sym[4];
	memset(st, 0xff, sizeof st);
	SAME("insertsym 2 x 2 %d", fi_av_insertsym(av, "127.0.0.1", 2, "7500", 2, sym, FI_SYNC_ERR, st));
	CHECK_OFI("insertsym writes every status", !st[0] && !st[1] && !st[2] && !st[3]);
	char nm[64];
	size_t nl = sizeof nm;
	SAME("the second host's second port %d",
	     fi_av_lookup(av, sym[3], nm, &nl) == 0 &&
		     ntohs(((struct sockaddr_in *)nm)->sin_port) == 7501 &&
		     ntohl(((struct sockaddr_in *)nm)->sin_addr.s_addr) == 0x7f000002);
	/* A name without a numeric suffix names one host only (libfabric
	 * 1.17 inserts it anyway). */
	CHECK_OFI("insertsym of 2 hosts named without a suffix fails",
		  fi_av_insertsym(av, "localhost", 2, "7600", 1, sym, 0, NULL) < 0);
	CHECK("av close", fi_close(&av->fid) == 0);

	/* fi_getname with a short buffer: -FI_ETOOSMALL, the length needed,
	 * and the address truncated. */
	struct sockaddr_in full;
	size_t fl = sizeof full;
	CHECK("getname", fi_getname(&l.ep->fid, &full, &fl) == 0);
	unsigned char part[4] = { 0 };
	size_t pl = sizeof part;
	r = fi_getname(&l.ep->fid, part, &pl);
	SAME("getname into 4 bytes %d, needs %zu", r, pl);
	/* libfabric 1.17 copies nothing. */
	CHECK_OFI("the first 4 bytes are the address's", !memcmp(part, &full, sizeof part));

	loop_close(&l);
	return finish();
}
