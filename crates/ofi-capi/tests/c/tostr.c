/* Prints fi_tostr / fi_tostr_r of a fixed set of values, one block per
 * call. Run on Debian's libfabric and on ofi's: the outputs must be equal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_trigger.h>
#include <rdma/fi_collective.h>
#include <rdma/providers/fi_log.h>
#include <netinet/in.h>
#include <arpa/inet.h>

static void show(const char *label, const void *data, enum fi_type t)
{
	printf("== %s\n%s\n", label, fi_tostr(data, t));
}

static void enum_range(const char *label, enum fi_type t, int lo, int hi)
{
	for (int v = lo; v <= hi; v++) {
		char l[64];
		snprintf(l, sizeof l, "%s %d", label, v);
		show(l, &v, t);
	}
}

static int tostr_of_fid(const struct fid *fid, char *buf, size_t len)
{
	snprintf(buf, len, "object of class %zu", fid->fclass);
	return 0;
}

int main(void)
{
	uint64_t sets[] = { 0, ~0ULL, FI_MSG | FI_TAGGED | FI_RECV, (1ULL << 62) | FI_RMA,
			    FI_CONTEXT | FI_CONTEXT2, FI_ORDER_STRICT | FI_ORDER_DATA,
			    FI_ORDER_RMA_RAW | FI_ORDER_SAS, FI_COMPLETION | FI_INJECT | FI_MORE,
			    FI_CLAIM | FI_DISCARD | FI_PEEK };
	enum fi_type bit_types[] = { FI_TYPE_CAPS, FI_TYPE_OP_FLAGS, FI_TYPE_MSG_ORDER,
				     FI_TYPE_MODE, FI_TYPE_CQ_EVENT_FLAGS };
	for (size_t t = 0; t < sizeof bit_types / sizeof bit_types[0]; t++)
		for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
			char l[64];
			snprintf(l, sizeof l, "bits type %d set %zu", bit_types[t], s);
			show(l, &sets[s], bit_types[t]);
		}
	int mr_modes[] = { 0, -1, FI_MR_BASIC, FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED };
	for (size_t i = 0; i < sizeof mr_modes / sizeof mr_modes[0]; i++)
		show("mr_mode", &mr_modes[i], FI_TYPE_MR_MODE);

	enum_range("ep_type", FI_TYPE_EP_TYPE, -1, 7);
	enum_range("addr_format", FI_TYPE_ADDR_FORMAT, -1, 17);
	enum_range("threading", FI_TYPE_THREADING, -1, 7);
	enum_range("progress", FI_TYPE_PROGRESS, -1, 4);
	enum_range("protocol", FI_TYPE_PROTOCOL, -1, 27);
	enum_range("av_type", FI_TYPE_AV_TYPE, -1, 4);
	enum_range("atomic_type", FI_TYPE_ATOMIC_TYPE, -1, 17);
	enum_range("atomic_op", FI_TYPE_ATOMIC_OP, -1, 20);
	enum_range("eq_event", FI_TYPE_EQ_EVENT, -1, 8);
	enum_range("op_type", FI_TYPE_OP_TYPE, -1, 12);
	enum_range("collective_op", FI_TYPE_COLLECTIVE_OP, -1, 10);
	enum_range("hmem_iface", FI_TYPE_HMEM_IFACE, -1, 7);
	enum_range("cq_format", FI_TYPE_CQ_FORMAT, -1, 6);
	enum_range("log_level", FI_TYPE_LOG_LEVEL, -1, 5);
	enum_range("log_subsys", FI_TYPE_LOG_SUBSYS, -1, 11);
	int zero = 0;
	show("version", &zero, FI_TYPE_VERSION);
	show("unknown type", &zero, (enum fi_type) 99);
	show("null data", NULL, FI_TYPE_CAPS);

	struct fi_ops ops = { .size = sizeof(struct fi_ops), .tostr = tostr_of_fid };
	struct fid f = { .fclass = FI_CLASS_CQ, .ops = &ops };
	show("fid with tostr", &f, FI_TYPE_FID);

	struct fi_info *i = fi_allocinfo();
	i->caps = FI_MSG | FI_RMA | FI_TAGGED | FI_LOCAL_COMM | FI_REMOTE_COMM;
	i->mode = FI_CONTEXT;
	i->addr_format = FI_SOCKADDR_IN;
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(4242) };
	inet_pton(AF_INET, "192.0.2.7", &sin.sin_addr);
	i->src_addr = malloc(sizeof sin);
	memcpy(i->src_addr, &sin, sizeof sin);
	i->src_addrlen = sizeof sin;
	i->tx_attr->caps = FI_MSG | FI_SEND;
	i->tx_attr->op_flags = FI_COMPLETION;
	i->tx_attr->msg_order = FI_ORDER_SAS | FI_ORDER_RMA_WAW;
	i->tx_attr->comp_order = FI_ORDER_NONE;
	i->tx_attr->inject_size = 64;
	i->tx_attr->size = 1024;
	i->tx_attr->iov_limit = 4;
	i->tx_attr->rma_iov_limit = 1;
	i->tx_attr->tclass = FI_TC_BULK_DATA;
	i->rx_attr->caps = FI_MSG | FI_RECV;
	i->rx_attr->comp_order = FI_ORDER_STRICT | FI_ORDER_DATA;
	i->rx_attr->size = 512;
	i->ep_attr->type = FI_EP_RDM;
	i->ep_attr->protocol = FI_PROTO_XNET;
	i->ep_attr->max_msg_size = (size_t) -1;
	i->ep_attr->mem_tag_format = 0xaaaaaaaaaaaaaaaaULL;
	i->ep_attr->tx_ctx_cnt = 1;
	i->ep_attr->rx_ctx_cnt = 1;
	i->domain_attr->name = strdup("eth0");
	i->domain_attr->threading = FI_THREAD_SAFE;
	i->domain_attr->control_progress = FI_PROGRESS_AUTO;
	i->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	i->domain_attr->resource_mgmt = FI_RM_ENABLED;
	i->domain_attr->av_type = FI_AV_TABLE;
	i->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR;
	i->domain_attr->mr_key_size = 8;
	i->domain_attr->cq_data_size = 8;
	i->domain_attr->caps = FI_LOCAL_COMM;
	i->domain_attr->mr_cnt = 1 << 16;
	i->fabric_attr->name = strdup("192.0.2.0/24");
	i->fabric_attr->prov_name = strdup("tcp");
	i->fabric_attr->prov_version = FI_VERSION(117, 0);
	i->fabric_attr->api_version = FI_VERSION(1, 17);
	show("info", i, FI_TYPE_INFO);
	show("tx_attr", i->tx_attr, FI_TYPE_TX_ATTR);
	show("rx_attr", i->rx_attr, FI_TYPE_RX_ATTR);
	show("ep_attr", i->ep_attr, FI_TYPE_EP_ATTR);
	show("domain_attr", i->domain_attr, FI_TYPE_DOMAIN_ATTR);
	show("fabric_attr", i->fabric_attr, FI_TYPE_FABRIC_ATTR);

	struct sockaddr_in6 sin6 = { .sin6_family = AF_INET6, .sin6_port = htons(7471) };
	inet_pton(AF_INET6, "fd00::12:34", &sin6.sin6_addr);
	i->addr_format = FI_SOCKADDR_IN6;
	i->dest_addr = malloc(sizeof sin6);
	memcpy(i->dest_addr, &sin6, sizeof sin6);
	i->dest_addrlen = sizeof sin6;
	free(i->src_addr);
	i->src_addr = malloc(sizeof sin6);
	memcpy(i->src_addr, &sin6, sizeof sin6);
	i->src_addrlen = sizeof sin6;
	show("info with IPv6 addresses", i, FI_TYPE_INFO);
	i->addr_format = FI_SOCKADDR;
	show("info with FI_SOCKADDR addresses", i, FI_TYPE_INFO);
	free(i->dest_addr);
	i->dest_addr = NULL;
	i->dest_addrlen = 0;

	i->addr_format = FI_ADDR_STR;
	free(i->src_addr);
	i->src_addr = strdup("fi_shm://4242");
	i->src_addrlen = strlen("fi_shm://4242") + 1;
	show("info with a string address", i, FI_TYPE_INFO);

	uint64_t caps = FI_MSG | FI_TAGGED | FI_RECV;
	char buf[64];
	/* The buffer is cleared before each call: libfabric leaves the byte
	 * before the terminating NUL of a cut text as it was. */
	for (size_t n = 1; n <= 30; n++) {
		memset(buf, 0, sizeof buf);
		printf("== tostr_r caps %zu\n[%s]\n", n, fi_tostr_r(buf, n, &caps, FI_TYPE_CAPS));
	}
	printf("== tostr_r NULL buffer\n%s\n", fi_tostr_r(NULL, 10, &caps, FI_TYPE_CAPS) ? "not NULL" : "NULL");
	fi_freeinfo(i);
	return 0;
}
