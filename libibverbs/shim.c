//go:build libibverbs

/*
 * The C half of softhca's libibverbs.so.1: every exported symbol, and the
 * objects the application sees. See main.go for the design; the symbol
 * versions are assigned by libibverbs.map, and the few names that exist
 * in two versions (the pre-1.1 ABI) get their old one with .symver here.
 *
 * Checks rdma-core leaves to a crash (a NULL object) return EINVAL here:
 * a drop-in must never take a program down that the original would not.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <endian.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <infiniband/verbs.h>
#include <infiniband/sa.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
#include "shim.h"
#include "_cgo_export.h"

#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define EXPORT __attribute__((visibility("default")))

/* The names that also have a pre-1.1 version (compat.c) are defined under
 * another name and take their default version at the end of the file, as
 * rdma-core's LATEST_SYMVER_FUNC does: the plain name must not be exported
 * too. */
#define ibv_ack_async_event shca_ibv_ack_async_event_1_1
#define ibv_ack_cq_events shca_ibv_ack_cq_events_1_1
#define ibv_alloc_pd shca_ibv_alloc_pd_1_1
#define ibv_attach_mcast shca_ibv_attach_mcast_1_1
#define ibv_close_device shca_ibv_close_device_1_1
#define ibv_create_ah shca_ibv_create_ah_1_1
#define ibv_create_cq shca_ibv_create_cq_1_1
#define ibv_create_qp shca_ibv_create_qp_1_1
#define ibv_create_srq shca_ibv_create_srq_1_1
#define ibv_dealloc_pd shca_ibv_dealloc_pd_1_1
#define ibv_dereg_mr shca_ibv_dereg_mr_1_1
#define ibv_destroy_ah shca_ibv_destroy_ah_1_1
#define ibv_destroy_cq shca_ibv_destroy_cq_1_1
#define ibv_destroy_qp shca_ibv_destroy_qp_1_1
#define ibv_destroy_srq shca_ibv_destroy_srq_1_1
#define ibv_detach_mcast shca_ibv_detach_mcast_1_1
#define ibv_free_device_list shca_ibv_free_device_list_1_1
#define ibv_get_async_event shca_ibv_get_async_event_1_1
#define ibv_get_cq_event shca_ibv_get_cq_event_1_1
#define ibv_get_device_guid shca_ibv_get_device_guid_1_1
#define ibv_get_device_list shca_ibv_get_device_list_1_1
#define ibv_get_device_name shca_ibv_get_device_name_1_1
#define ibv_modify_qp shca_ibv_modify_qp_1_1
#define ibv_modify_srq shca_ibv_modify_srq_1_1
#define ibv_open_device shca_ibv_open_device_1_1
#define ibv_query_device shca_ibv_query_device_1_1
#define ibv_query_gid shca_ibv_query_gid_1_1
#define ibv_query_pkey shca_ibv_query_pkey_1_1
#define ibv_query_port shca_ibv_query_port_1_1
#define ibv_query_qp shca_ibv_query_qp_1_1
#define ibv_query_srq shca_ibv_query_srq_1_1
#define ibv_reg_mr shca_ibv_reg_mr_1_1
#define ibv_resize_cq shca_ibv_resize_cq_1_1

/* ---------------------------------------------------------------- device */

static struct shca_device g_dev;
static int g_dev_err = ENODEV;
static pthread_once_t g_dev_once = PTHREAD_ONCE_INIT;

static void dev_init(void)
{
	uint64_t guid = 0;
	char name[IBV_SYSFS_NAME_MAX];

	g_dev_err = shca_go_device(name, sizeof(name), &guid);
	if (g_dev_err)
		return;
	g_dev.dev.node_type = IBV_NODE_CA;
	g_dev.dev.transport_type = IBV_TRANSPORT_IB;
	snprintf(g_dev.dev.name, sizeof(g_dev.dev.name), "%s", name);
	snprintf(g_dev.dev.dev_name, sizeof(g_dev.dev.dev_name), "uverbs0");
	snprintf(g_dev.dev.dev_path, sizeof(g_dev.dev.dev_path),
		 "/sys/class/infiniband_verbs/uverbs0");
	snprintf(g_dev.dev.ibdev_path, sizeof(g_dev.dev.ibdev_path),
		 "/sys/class/infiniband/%s", name);
	g_dev.guid = guid;
	g_dev.index = 0;
}

static struct shca_device *dev_of(struct ibv_device *d)
{
	return d == &g_dev.dev ? &g_dev : NULL;
}

EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct ibv_device **list;
	int n;

	pthread_once(&g_dev_once, dev_init);
	n = g_dev_err ? 0 : 1;
	list = calloc(n + 1, sizeof(*list));
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	if (n)
		list[0] = &g_dev.dev;
	if (num_devices)
		*num_devices = n;
	return list;
}

EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	if (!device) {
		errno = EINVAL;
		return NULL;
	}
	return device->name;
}

EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	struct shca_device *d = device ? dev_of(device) : NULL;

	return d ? htobe64(d->guid) : 0;
}

EXPORT int ibv_get_device_index(struct ibv_device *device)
{
	struct shca_device *d = device ? dev_of(device) : NULL;

	return d ? d->index : -1;
}

/* -------------------------------------------------------------- objects */

#define CTX(c) shca_container((c), struct shca_context, vctx.context)
#define PD(p) ((struct shca_pd *)(p))
#define MR(m) ((struct shca_mr *)(m))
#define CQ(c) ((struct shca_cq *)(c))
#define QP(q) ((struct shca_qp *)(q))
#define SRQ(s) ((struct shca_srq *)(s))
#define AH(a) ((struct shca_ah *)(a))
#define CHAN(c) ((struct shca_channel *)(c))

/* ret_err: an int verb's failure, errno set too. */
static int ret_err(int err)
{
	errno = err;
	return err;
}

static void *null_err(int err)
{
	errno = err ? err : EINVAL;
	return NULL;
}

/* The data path, reached through context->ops and the extended ops. */

static int shca_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
	return shca_go_poll_cq(CQ(cq)->h, num_entries, wc, NULL, NULL);
}

static int shca_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return shca_go_req_notify_cq(CQ(cq)->h, solicited_only);
}

/* The post verbs: bad_wr is set only on failure, as providers do; a
 * failure that names no request (an internal error) names the first. */
#define SHCA_POST(name, objtype, obj, wrtype, gofn)                        \
	static int name(struct objtype *obj, struct wrtype *wr,             \
			struct wrtype **bad_wr)                             \
	{                                                                   \
		struct wrtype *bad = NULL;                                  \
		int err = gofn(((struct shca_##obj *)obj)->h, wr, &bad);    \
                                                                            \
		if (err && bad_wr)                                          \
			*bad_wr = bad ? bad : wr;                           \
		return err;                                                 \
	}

SHCA_POST(shca_post_send, ibv_qp, qp, ibv_send_wr, shca_go_post_send)
SHCA_POST(shca_post_recv, ibv_qp, qp, ibv_recv_wr, shca_go_post_recv)
SHCA_POST(shca_post_srq_recv, ibv_srq, srq, ibv_recv_wr, shca_go_post_srq_recv)
SHCA_POST(shca_post_srq_ops, ibv_srq, srq, ibv_ops_wr, shca_go_post_srq_ops)

static int shca_query_port_ex(struct ibv_context *context, uint8_t port_num,
			      struct ibv_port_attr *port_attr, size_t len)
{
	struct ibv_port_attr a;
	int err;

	if (!context || !port_attr)
		return EINVAL;
	err = shca_go_query_port(CTX(context)->h, port_num, &a);
	if (err)
		return err;
	memcpy(port_attr, &a, len < sizeof(a) ? len : sizeof(a));
	if (len > sizeof(a))
		memset((char *)port_attr + sizeof(a), 0, len - sizeof(a));
	return 0;
}

static int shca_query_device_ex(struct ibv_context *context,
				const struct ibv_query_device_ex_input *input,
				struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ibv_device_attr_ex a;
	int err;

	if (!context || !attr || attr_size < sizeof(attr->orig_attr))
		return EINVAL;
	if (input && input->comp_mask)
		return EINVAL;
	memset(&a, 0, sizeof(a));
	err = shca_go_query_device_ex(CTX(context)->h, &a);
	if (err)
		return err;
	memset(attr, 0, attr_size);
	memcpy(attr, &a, attr_size < sizeof(a) ? attr_size : sizeof(a));
	return 0;
}

static struct ibv_cq_ex *shca_create_cq_ex(struct ibv_context *context,
					   struct ibv_cq_init_attr_ex *attr);
static struct ibv_qp *shca_create_qp_ex(struct ibv_context *context,
					struct ibv_qp_init_attr_ex *attr);
static struct ibv_srq *shca_create_srq_ex(struct ibv_context *context,
					  struct ibv_srq_init_attr_ex *attr);

static int shca_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num)
{
	(void)srq;
	(void)srq_num;
	return EOPNOTSUPP; /* XRC SRQs only; softhca has no XRC */
}

/* ---------------------------------------------------------------- context */

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct shca_context *c;
	struct verbs_context *v;
	int err = 0;
	shca_handle h;

	if (!device || !dev_of(device))
		return null_err(ENODEV);
	h = shca_go_open(&err);
	if (!h)
		return null_err(err);
	c = calloc(1, sizeof(*c));
	if (!c) {
		shca_go_close(h);
		return null_err(ENOMEM);
	}
	c->h = h;
	c->sdev = dev_of(device);
	v = &c->vctx;
	v->sz = sizeof(*v);
	v->context.device = device;
	v->context.cmd_fd = -1;
	v->context.async_fd = shca_go_async_fd(h);
	v->context.num_comp_vectors = 1;
	v->context.abi_compat = __VERBS_ABI_IS_EXTENDED;
	pthread_mutex_init(&v->context.mutex, NULL);

	v->context.ops.poll_cq = shca_poll_cq;
	v->context.ops.req_notify_cq = shca_req_notify_cq;
	v->context.ops.post_send = shca_post_send;
	v->context.ops.post_recv = shca_post_recv;
	v->context.ops.post_srq_recv = shca_post_srq_recv;

	v->query_port = shca_query_port_ex;
	v->query_device_ex = shca_query_device_ex;
	v->create_cq_ex = shca_create_cq_ex;
	v->create_qp_ex = shca_create_qp_ex;
	v->create_srq_ex = shca_create_srq_ex;
	v->post_srq_ops = shca_post_srq_ops;
	v->get_srq_num = shca_get_srq_num;
	return &v->context;
}

EXPORT int ibv_close_device(struct ibv_context *context)
{
	struct shca_context *c;
	int err;

	if (!context)
		return ret_err(EINVAL);
	c = CTX(context);
	err = shca_go_close(c->h);
	if (err)
		return ret_err(err);
	pthread_mutex_destroy(&context->mutex);
	free(c);
	return 0;
}

EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
	(void)cmd_fd;
	return null_err(EOPNOTSUPP); /* no kernel context to share */
}

EXPORT int ibv_query_device(struct ibv_context *context,
			    struct ibv_device_attr *device_attr)
{
	if (!context || !device_attr)
		return ret_err(EINVAL);
	return shca_go_query_device(CTX(context)->h, device_attr);
}

/* The exported ibv_query_port is the pre-extension entry; verbs.h's
 * inline calls query_port above, this one is for old binaries. The
 * _compat_ibv_port_attr it fills is ibv_port_attr without its tail. */
EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num,
			  struct _compat_ibv_port_attr *port_attr)
{
	/* rdma-core's struct ends with flags, before port_cap_flags2 */
	return shca_query_port_ex(context, port_num,
				  (struct ibv_port_attr *)port_attr,
				  offsetof(struct ibv_port_attr, port_cap_flags2));
}

EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num,
			 int index, union ibv_gid *gid)
{
	int err;

	if (!context || !gid)
		return ret_err(EINVAL);
	err = shca_go_query_gid(CTX(context)->h, port_num, index, gid);
	if (err) {
		errno = err;
		return -1; /* rdma-core: -1 when the entry cannot be read */
	}
	return 0;
}

EXPORT int ibv_query_pkey(struct ibv_context *context, uint8_t port_num,
			  int index, __be16 *pkey)
{
	int err;

	if (!context || !pkey)
		return ret_err(EINVAL);
	err = shca_go_query_pkey(CTX(context)->h, port_num, index, pkey);
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}

EXPORT int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num,
			      __be16 pkey)
{
	__be16 p;
	int i;

	for (i = 0; i < 64; i++) {
		if (ibv_query_pkey(context, port_num, i, &p))
			break;
		if (p == pkey)
			return i;
	}
	errno = ENOENT;
	return -1;
}

/* enum ibv_gid_type_sysfs (rdma-core's driver.h): every softhca GID is a
 * RoCEv2 GID. */
enum { SHCA_GID_TYPE_SYSFS_IB_ROCE_V1 = 0, SHCA_GID_TYPE_SYSFS_ROCE_V2 = 1 };

EXPORT int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
			      unsigned int index, int *type)
{
	int err;

	if (!context || !type)
		return ret_err(EINVAL);
	err = shca_go_gid_in_use(CTX(context)->h, port_num, (int)index);
	if (err == ENODATA) {
		/* rdma-core reads an unset entry's type as RoCEv1 */
		*type = SHCA_GID_TYPE_SYSFS_IB_ROCE_V1;
		return 0;
	}
	if (err) {
		errno = err;
		return -1;
	}
	*type = SHCA_GID_TYPE_SYSFS_ROCE_V2;
	return 0;
}

static int gid_entry(struct ibv_context *context, uint32_t port_num,
		     uint32_t index, struct ibv_gid_entry *entry)
{
	int err = shca_go_gid_in_use(CTX(context)->h, port_num, index);

	if (err)
		return err;
	memset(entry, 0, sizeof(*entry));
	err = shca_go_query_gid(CTX(context)->h, port_num, index, &entry->gid);
	if (err)
		return err;
	entry->gid_index = index;
	entry->port_num = port_num;
	entry->gid_type = IBV_GID_TYPE_ROCE_V2;
	entry->ndev_ifindex = 0;
	return 0;
}

EXPORT int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num,
			     uint32_t gid_index, struct ibv_gid_entry *entry,
			     uint32_t flags, size_t entry_size)
{
	struct ibv_gid_entry e;
	int err;

	if (!context || !entry || flags || entry_size < sizeof(e))
		return EINVAL;
	err = gid_entry(context, port_num, gid_index, &e);
	if (err)
		return err;
	memcpy(entry, &e, sizeof(e));
	return 0;
}

EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *context,
				    struct ibv_gid_entry *entries,
				    size_t max_entries, uint32_t flags,
				    size_t entry_size)
{
	struct ibv_port_attr pa;
	ssize_t n = 0;
	int i;

	if (!context || flags || entry_size < sizeof(*entries) ||
	    (max_entries && !entries))
		return -EINVAL;
	if (shca_go_query_port(CTX(context)->h, 1, &pa))
		return -EINVAL;
	for (i = 0; i < pa.gid_tbl_len; i++) {
		struct ibv_gid_entry e;

		if (gid_entry(context, 1, i, &e))
			continue;
		if ((size_t)n >= max_entries)
			return -EINVAL;
		memcpy((char *)entries + n * entry_size, &e, sizeof(e));
		n++;
	}
	return n;
}

/* ------------------------------------------------------------------ async */

EXPORT int ibv_get_async_event(struct ibv_context *context,
			       struct ibv_async_event *event)
{
	int fl, type = 0, port = 0, err;
	void *obj = NULL;

	if (!context || !event)
		return ret_err(EINVAL), -1;
	fl = fcntl(context->async_fd, F_GETFL);
	err = shca_go_get_async_event(CTX(context)->h,
				      fl >= 0 && (fl & O_NONBLOCK), &type, &obj,
				      &port);
	if (err) {
		errno = err;
		return -1;
	}
	memset(event, 0, sizeof(*event));
	event->event_type = type;
	switch (type) {
	case IBV_EVENT_CQ_ERR:
		event->element.cq = obj;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		event->element.srq = obj;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		event->element.port_num = port;
		break;
	case IBV_EVENT_DEVICE_FATAL:
		break;
	default:
		event->element.qp = obj;
		break;
	}
	return 0;
}

EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
	void *obj = NULL;
	struct ibv_context *ctx = NULL;

	if (!event)
		return;
	switch (event->event_type) {
	case IBV_EVENT_CQ_ERR:
		obj = event->element.cq;
		ctx = obj ? event->element.cq->context : NULL;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		obj = event->element.srq;
		ctx = obj ? event->element.srq->context : NULL;
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		obj = event->element.qp;
		ctx = obj ? event->element.qp->context : NULL;
		break;
	default:
		return; /* port and device events need no acknowledgement */
	}
	if (ctx)
		shca_go_ack_async_event(CTX(ctx)->h, obj);
}

/* --------------------------------------------------------------------- PD */

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct shca_pd *p;
	int err = 0;

	if (!context)
		return null_err(EINVAL);
	p = calloc(1, sizeof(*p));
	if (!p)
		return null_err(ENOMEM);
	p->h = shca_go_alloc_pd(CTX(context)->h, &err);
	if (!p->h) {
		free(p);
		return null_err(err);
	}
	p->pd.context = context;
	p->pd.handle = shca_go_pd_handle(p->h);
	return &p->pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	int err;

	if (!pd)
		return ret_err(EINVAL);
	err = shca_go_dealloc_pd(PD(pd)->h);
	if (err)
		return ret_err(err);
	free(PD(pd));
	return 0;
}

EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *context,
				    uint32_t pd_handle)
{
	(void)context;
	(void)pd_handle;
	return null_err(EOPNOTSUPP);
}

EXPORT void ibv_unimport_pd(struct ibv_pd *pd)
{
	(void)pd;
}

/* --------------------------------------------------------------------- MR */

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr,
				       size_t length, uint64_t iova,
				       unsigned int access)
{
	struct shca_mr *m;
	uint32_t lkey = 0, rkey = 0;
	int err = 0;

	if (!pd)
		return null_err(EINVAL);
	/* IBV_ACCESS_OPTIONAL_RANGE bits may be ignored (verbs.h) */
	access &= ~IBV_ACCESS_OPTIONAL_RANGE;
	m = calloc(1, sizeof(*m));
	if (!m)
		return null_err(ENOMEM);
	m->h = shca_go_reg_mr(PD(pd)->h, addr, length, iova, (int)access,
			      &lkey, &rkey, &err);
	if (!m->h) {
		free(m);
		return null_err(err);
	}
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.handle = lkey;
	m->mr.lkey = lkey;
	m->mr.rkey = rkey;
	return &m->mr;
}

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
				 int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, access);
}

EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr,
				      size_t length, uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, access);
}

EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
					size_t length, uint64_t iova, int fd,
					int access)
{
	(void)pd; (void)offset; (void)length; (void)iova; (void)fd; (void)access;
	return null_err(EOPNOTSUPP); /* no device memory to map a dma-buf into */
}

EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd,
			void *addr, size_t length, int access)
{
	(void)pd;
	/* rdma-core's input checks first (EINVAL); then softhca cannot
	 * change a registered region (EOPNOTSUPP): deregister and register. */
	if (!mr || (flags & ~(IBV_REREG_MR_FLAGS_SUPPORTED)) ||
	    ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!length || !addr)) ||
	    (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS))) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	errno = EOPNOTSUPP;
	return IBV_REREG_MR_ERR_INPUT;
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	int err;

	if (!mr)
		return ret_err(EINVAL);
	err = shca_go_dereg_mr(MR(mr)->h);
	if (err)
		return ret_err(err);
	free(MR(mr));
	return 0;
}

EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	(void)pd;
	(void)mr_handle;
	return null_err(EOPNOTSUPP);
}

EXPORT void ibv_unimport_mr(struct ibv_mr *mr)
{
	(void)mr;
}

EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *context,
				    uint32_t dm_handle)
{
	(void)context;
	(void)dm_handle;
	return null_err(EOPNOTSUPP);
}

EXPORT void ibv_unimport_dm(struct ibv_dm *dm)
{
	(void)dm;
}

/* ---------------------------------------------------------- comp channel */

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	struct shca_channel *c;
	int err = 0, fd = -1, fl;

	if (!context)
		return null_err(EINVAL);
	c = calloc(1, sizeof(*c));
	if (!c)
		return null_err(ENOMEM);
	c->h = shca_go_create_channel(CTX(context)->h, &fd, &err);
	if (!c->h) {
		free(c);
		return null_err(err);
	}
	/* Blocking, as rdma-core's channel fd is: an application sets
	 * O_NONBLOCK itself, and ibv_get_cq_event reads that flag. */
	fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	c->ch.context = context;
	c->ch.fd = fd;
	c->ch.refcnt = 0;
	return &c->ch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	int err;

	if (!channel)
		return ret_err(EINVAL);
	err = shca_go_destroy_channel(CHAN(channel)->h);
	if (err)
		return ret_err(err);
	free(CHAN(channel));
	return 0;
}

EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel,
			    struct ibv_cq **cq, void **cq_context)
{
	struct shca_cq *c;
	void *w = NULL;
	int fl, err;

	if (!channel || !cq || !cq_context) {
		errno = EINVAL;
		return -1;
	}
	fl = fcntl(channel->fd, F_GETFL);
	err = shca_go_get_cq_event(CHAN(channel)->h, fl >= 0 && (fl & O_NONBLOCK),
				   &w);
	if (err) {
		errno = err;
		return -1;
	}
	c = w;
	*cq = ibv_cq_ex_to_cq(&c->cq);
	*cq_context = c->cq.cq_context;
	return 0;
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	if (cq)
		shca_go_ack_cq_events(CQ(cq)->h, nevents);
}

/* --------------------------------------------------------------------- CQ */

static int cqx_start_poll(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr)
{
	struct shca_cq *c = CQ(cq);
	int n;

	if (attr && attr->comp_mask)
		return EINVAL;
	n = shca_go_poll_cq(c->h, 1, &c->cur, &c->cur_tag, &c->cur_priv);
	if (n < 0)
		return EINVAL;
	if (n == 0)
		return ENOENT;
	cq->wr_id = c->cur.wr_id;
	cq->status = c->cur.status;
	return 0;
}

static int cqx_next_poll(struct ibv_cq_ex *cq)
{
	return cqx_start_poll(cq, NULL);
}

static void cqx_end_poll(struct ibv_cq_ex *cq)
{
	(void)cq;
}

static enum ibv_wc_opcode cqx_read_opcode(struct ibv_cq_ex *cq) { return CQ(cq)->cur.opcode; }
static uint32_t cqx_read_vendor_err(struct ibv_cq_ex *cq) { return CQ(cq)->cur.vendor_err; }
static uint32_t cqx_read_byte_len(struct ibv_cq_ex *cq) { return CQ(cq)->cur.byte_len; }
static __be32 cqx_read_imm_data(struct ibv_cq_ex *cq) { return CQ(cq)->cur.imm_data; }
static uint32_t cqx_read_qp_num(struct ibv_cq_ex *cq) { return CQ(cq)->cur.qp_num; }
static uint32_t cqx_read_src_qp(struct ibv_cq_ex *cq) { return CQ(cq)->cur.src_qp; }
static unsigned int cqx_read_wc_flags(struct ibv_cq_ex *cq) { return CQ(cq)->cur.wc_flags; }
static uint32_t cqx_read_slid(struct ibv_cq_ex *cq) { return CQ(cq)->cur.slid; }
static uint8_t cqx_read_sl(struct ibv_cq_ex *cq) { return CQ(cq)->cur.sl; }
static uint8_t cqx_read_dlid_path_bits(struct ibv_cq_ex *cq) { return CQ(cq)->cur.dlid_path_bits; }
static uint64_t cqx_read_zero64(struct ibv_cq_ex *cq) { (void)cq; return 0; }
static uint16_t cqx_read_cvlan(struct ibv_cq_ex *cq) { (void)cq; return 0; }
static uint32_t cqx_read_flow_tag(struct ibv_cq_ex *cq) { (void)cq; return 0; }

static void cqx_read_tm_info(struct ibv_cq_ex *cq, struct ibv_wc_tm_info *tm)
{
	tm->tag = CQ(cq)->cur_tag;
	tm->priv = CQ(cq)->cur_priv;
}

/* What an extended CQ can report (ibv_create_cq_ex's wc_flags). */
#define SHCA_CQ_WC_FLAGS                                                      \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | \
	 IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |     \
	 IBV_WC_EX_WITH_DLID_PATH_BITS | IBV_WC_EX_WITH_TM_INFO)

static struct ibv_cq_ex *create_cq(struct ibv_context *context, int cqe,
				   void *cq_context,
				   struct ibv_comp_channel *channel,
				   int comp_vector, uint64_t wc_flags)
{
	struct shca_cq *c;
	struct ibv_cq_ex *x;
	int err = 0, actual = 0;

	if (!context)
		return null_err(EINVAL);
	if (wc_flags & ~(uint64_t)SHCA_CQ_WC_FLAGS)
		return null_err(EOPNOTSUPP);
	c = calloc(1, sizeof(*c));
	if (!c)
		return null_err(ENOMEM);
	c->h = shca_go_create_cq(CTX(context)->h, cqe,
				 channel ? CHAN(channel)->h : 0, c, comp_vector,
				 &actual, &err);
	if (!c->h) {
		free(c);
		return null_err(err);
	}
	c->wc_flags = wc_flags;
	x = &c->cq;
	x->context = context;
	x->channel = channel;
	x->cq_context = cq_context;
	x->cqe = actual;
	pthread_mutex_init(&x->mutex, NULL);
	pthread_cond_init(&x->cond, NULL);
	x->start_poll = cqx_start_poll;
	x->next_poll = cqx_next_poll;
	x->end_poll = cqx_end_poll;
	x->read_opcode = cqx_read_opcode;
	x->read_vendor_err = cqx_read_vendor_err;
	x->read_byte_len = cqx_read_byte_len;
	x->read_imm_data = cqx_read_imm_data;
	x->read_qp_num = cqx_read_qp_num;
	x->read_src_qp = cqx_read_src_qp;
	x->read_wc_flags = cqx_read_wc_flags;
	x->read_slid = cqx_read_slid;
	x->read_sl = cqx_read_sl;
	x->read_dlid_path_bits = cqx_read_dlid_path_bits;
	x->read_completion_ts = cqx_read_zero64;
	x->read_cvlan = cqx_read_cvlan;
	x->read_flow_tag = cqx_read_flow_tag;
	x->read_tm_info = cqx_read_tm_info;
	x->read_completion_wallclock_ns = cqx_read_zero64;
	if (channel)
		__atomic_add_fetch(&channel->refcnt, 1, __ATOMIC_RELAXED);
	return x;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe,
				    void *cq_context,
				    struct ibv_comp_channel *channel,
				    int comp_vector)
{
	struct ibv_cq_ex *x = create_cq(context, cqe, cq_context, channel,
					comp_vector, 0);

	return x ? ibv_cq_ex_to_cq(x) : NULL;
}

static struct ibv_cq_ex *shca_create_cq_ex(struct ibv_context *context,
					   struct ibv_cq_init_attr_ex *attr)
{
	if (!attr)
		return null_err(EINVAL);
	if (attr->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS |
					  IBV_CQ_INIT_ATTR_MASK_PD))
		return null_err(EINVAL);
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	    (attr->flags & ~(uint32_t)(IBV_CREATE_CQ_ATTR_SINGLE_THREADED |
				       IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)))
		return null_err(EOPNOTSUPP);
	return create_cq(context, attr->cqe, attr->cq_context, attr->channel,
			 attr->comp_vector, attr->wc_flags);
}

EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	int err, actual = 0;

	if (!cq)
		return ret_err(EINVAL);
	err = shca_go_resize_cq(CQ(cq)->h, cqe, &actual);
	if (err)
		return ret_err(err);
	cq->cqe = actual;
	return 0;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct ibv_comp_channel *ch;
	int err;

	if (!cq)
		return ret_err(EINVAL);
	ch = cq->channel;
	err = shca_go_destroy_cq(CQ(cq)->h);
	if (err)
		return ret_err(err);
	if (ch)
		__atomic_sub_fetch(&ch->refcnt, 1, __ATOMIC_RELAXED);
	pthread_mutex_destroy(&cq->mutex);
	pthread_cond_destroy(&cq->cond);
	free(CQ(cq));
	return 0;
}

/* -------------------------------------------------------------------- SRQ */

static struct ibv_srq *create_srq(struct ibv_pd *pd, void *srq_context,
				  struct ibv_srq_attr *attr, struct ibv_cq *cq,
				  int tm, const struct ibv_tm_cap *tm_cap)
{
	struct shca_srq *s;
	int err = 0;

	if (!pd || !attr)
		return null_err(EINVAL);
	s = calloc(1, sizeof(*s));
	if (!s)
		return null_err(ENOMEM);
	s->h = shca_go_create_srq(PD(pd)->h, cq ? CQ(cq)->h : 0, s, attr, tm,
				  tm ? tm_cap->max_num_tags : 0,
				  tm ? tm_cap->max_ops : 0, &err);
	if (!s->h) {
		free(s);
		return null_err(err);
	}
	s->srq.context = pd->context;
	s->srq.srq_context = srq_context;
	s->srq.pd = pd;
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	return &s->srq;
}

EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd,
				      struct ibv_srq_init_attr *init)
{
	if (!init)
		return null_err(EINVAL);
	return create_srq(pd, init->srq_context, &init->attr, NULL, 0, NULL);
}

static struct ibv_srq *shca_create_srq_ex(struct ibv_context *context,
					  struct ibv_srq_init_attr_ex *a)
{
	uint32_t known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
			 IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
	enum ibv_srq_type type = IBV_SRQT_BASIC;

	if (!context || !a || !(a->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !a->pd)
		return null_err(EINVAL);
	if (a->comp_mask & ~known)
		return null_err(EINVAL);
	if (a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE)
		type = a->srq_type;
	switch (type) {
	case IBV_SRQT_BASIC:
		return create_srq(a->pd, a->srq_context, &a->attr,
				  (a->comp_mask & IBV_SRQ_INIT_ATTR_CQ) ? a->cq : NULL,
				  0, NULL);
	case IBV_SRQT_TM:
		if (!(a->comp_mask & IBV_SRQ_INIT_ATTR_TM) ||
		    !(a->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !a->cq)
			return null_err(EINVAL);
		return create_srq(a->pd, a->srq_context, &a->attr, a->cq, 1,
				  &a->tm_cap);
	default:
		return null_err(EOPNOTSUPP); /* XRC */
	}
}

EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr,
			  int mask)
{
	if (!srq || !attr)
		return ret_err(EINVAL);
	return shca_go_modify_srq(SRQ(srq)->h, attr, mask);
}

EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	if (!srq || !attr)
		return ret_err(EINVAL);
	return shca_go_query_srq(SRQ(srq)->h, attr);
}

EXPORT int ibv_destroy_srq(struct ibv_srq *srq)
{
	int err;

	if (!srq)
		return ret_err(EINVAL);
	err = shca_go_destroy_srq(SRQ(srq)->h);
	if (err)
		return ret_err(err);
	pthread_mutex_destroy(&srq->mutex);
	pthread_cond_destroy(&srq->cond);
	free(SRQ(srq));
	return 0;
}

/* --------------------------------------------------------------------- QP */

static void qpx_init(struct shca_qp *q);

static struct ibv_qp *create_qp(struct ibv_pd *pd,
				struct ibv_qp_init_attr_ex *a, int is_ex)
{
	struct shca_qp *q;
	uint32_t qpn = 0;
	int err = 0;

	if (!pd || !a)
		return null_err(EINVAL);
	if (!a->send_cq || !a->recv_cq)
		return null_err(EINVAL);
	q = calloc(1, sizeof(*q));
	if (!q)
		return null_err(ENOMEM);
	q->h = shca_go_create_qp(PD(pd)->h, CQ(a->send_cq)->h,
				 CQ(a->recv_cq)->h, a->srq ? SRQ(a->srq)->h : 0,
				 q, a, &qpn, &err);
	if (!q->h) {
		free(q);
		return null_err(err);
	}
	q->qpx.qp_base.context = pd->context;
	q->qpx.qp_base.qp_context = a->qp_context;
	q->qpx.qp_base.pd = pd;
	q->qpx.qp_base.send_cq = a->send_cq;
	q->qpx.qp_base.recv_cq = a->recv_cq;
	q->qpx.qp_base.srq = a->srq;
	q->qpx.qp_base.handle = qpn;
	q->qpx.qp_base.qp_num = qpn;
	q->qpx.qp_base.state = IBV_QPS_RESET;
	q->qpx.qp_base.qp_type = a->qp_type;
	pthread_mutex_init(&q->qpx.qp_base.mutex, NULL);
	pthread_cond_init(&q->qpx.qp_base.cond, NULL);
	if (is_ex)
		qpx_init(q);
	return &q->qpx.qp_base;
}

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd,
				    struct ibv_qp_init_attr *init)
{
	struct ibv_qp_init_attr_ex a;
	struct ibv_qp *qp;

	if (!init)
		return null_err(EINVAL);
	memset(&a, 0, sizeof(a));
	memcpy(&a, init, sizeof(*init));
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = pd;
	qp = create_qp(pd, &a, 0);
	if (qp)
		init->cap = a.cap; /* what the QP got */
	return qp;
}

/* The ibv_wr_* operations a QP created with send_ops_flags supports. */
#define SHCA_SEND_OPS                                                        \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |     \
	 IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |                 \
	 IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |       \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV |     \
	 IBV_QP_EX_WITH_SEND_WITH_INV)

static struct ibv_qp *shca_create_qp_ex(struct ibv_context *context,
					struct ibv_qp_init_attr_ex *a)
{
	uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;

	if (!context || !a || !(a->comp_mask & IBV_QP_INIT_ATTR_PD))
		return null_err(EINVAL);
	if (a->comp_mask & ~known)
		return null_err(EOPNOTSUPP); /* XRC, RSS, create_flags, TSO */
	if ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
	    (a->send_ops_flags & ~(uint64_t)SHCA_SEND_OPS))
		return null_err(EOPNOTSUPP);
	if (a->pd && a->pd->context != context)
		return null_err(EINVAL);
	return create_qp(a->pd, a,
			 !!(a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS));
}

EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	if (!qp || !QP(qp)->is_ex)
		return NULL;
	return &QP(qp)->qpx;
}

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
			 int attr_mask)
{
	int err, state = 0;

	if (!qp || !attr)
		return ret_err(EINVAL);
	err = shca_go_modify_qp(QP(qp)->h, attr, attr_mask, &state);
	if (err)
		return ret_err(err);
	qp->state = state;
	return 0;
}

EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
			int attr_mask, struct ibv_qp_init_attr *init_attr)
{
	int err, state = 0;

	(void)attr_mask; /* every attribute is returned, as rdma-core may */
	if (!qp || !attr || !init_attr)
		return ret_err(EINVAL);
	memset(init_attr, 0, sizeof(*init_attr));
	err = shca_go_query_qp(QP(qp)->h, attr, init_attr, &state);
	if (err)
		return ret_err(err);
	init_attr->qp_context = qp->qp_context;
	init_attr->send_cq = qp->send_cq;
	init_attr->recv_cq = qp->recv_cq;
	init_attr->srq = qp->srq;
	qp->state = state;
	return 0;
}

EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op,
				      uint32_t flags)
{
	(void)qp;
	(void)op;
	(void)flags;
	return 0; /* data may be written in any order: rdma-core's default */
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	int err;

	if (!qp)
		return ret_err(EINVAL);
	err = shca_go_destroy_qp(QP(qp)->h);
	if (err)
		return ret_err(err);
	pthread_mutex_destroy(&qp->mutex);
	pthread_cond_destroy(&qp->cond);
	free(QP(qp)->batch);
	free(QP(qp));
	return 0;
}

EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
			    uint16_t lid)
{
	if (!qp || !gid)
		return ret_err(EINVAL);
	return shca_go_attach_mcast(QP(qp)->h, (union ibv_gid *)gid, lid, 1);
}

EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
			    uint16_t lid)
{
	if (!qp || !gid)
		return ret_err(EINVAL);
	return shca_go_attach_mcast(QP(qp)->h, (union ibv_gid *)gid, lid, 0);
}

EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	return ret_err(EOPNOTSUPP); /* as rdma-core for a device without ECE */
}

EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	return ret_err(EOPNOTSUPP);
}

/* ------------------------------------------------------- ibv_wr_* (qp_ex) */

#define QPX(x) ((struct shca_qp *)(x))

static struct ibv_send_wr *wr_new(struct ibv_qp_ex *x, enum ibv_wr_opcode op)
{
	struct shca_wr_batch *b = QPX(x)->batch;
	struct ibv_send_wr *w;

	if (!b || b->err)
		return NULL;
	if (b->n == SHCA_WR_BATCH) {
		b->err = ENOMEM;
		return NULL;
	}
	w = &b->wr[b->n];
	memset(w, 0, sizeof(*w));
	w->wr_id = x->wr_id;
	w->send_flags = x->wr_flags;
	w->opcode = op;
	b->sge[b->n].length = 0;
	b->sgl[b->n] = NULL;
	b->n++;
	return w;
}

static struct ibv_send_wr *wr_cur(struct ibv_qp_ex *x)
{
	struct shca_wr_batch *b = QPX(x)->batch;

	if (!b || b->err || b->n == 0)
		return NULL;
	return &b->wr[b->n - 1];
}

static void wr_start(struct ibv_qp_ex *x)
{
	struct shca_qp *q = QPX(x);

	if (!q->batch)
		q->batch = calloc(1, sizeof(*q->batch));
	if (q->batch) {
		q->batch->n = 0;
		q->batch->err = 0;
	}
}

static void wr_abort(struct ibv_qp_ex *x)
{
	struct shca_qp *q = QPX(x);
	int i;

	if (!q->batch)
		return;
	for (i = 0; i < q->batch->n; i++)
		free(q->batch->sgl[i]);
	q->batch->n = 0;
	q->batch->err = 0;
}

static int wr_complete(struct ibv_qp_ex *x)
{
	struct shca_wr_batch *b = QPX(x)->batch;
	struct ibv_send_wr *bad = NULL;
	int i, err;

	if (!b)
		return ENOMEM;
	if (b->err) {
		err = b->err;
		wr_abort(x);
		return err;
	}
	for (i = 0; i < b->n; i++) {
		struct ibv_send_wr *w = &b->wr[i];

		if (!w->sg_list && b->sge[i].length) {
			w->sg_list = &b->sge[i];
			w->num_sge = 1;
		}
		w->next = i + 1 < b->n ? &b->wr[i + 1] : NULL;
	}
	err = b->n ? shca_post_send(&x->qp_base, &b->wr[0], &bad) : 0;
	wr_abort(x);
	return err;
}

static void wr_send(struct ibv_qp_ex *x) { wr_new(x, IBV_WR_SEND); }

static void wr_send_imm(struct ibv_qp_ex *x, __be32 imm)
{
	struct ibv_send_wr *w = wr_new(x, IBV_WR_SEND_WITH_IMM);

	if (w)
		w->imm_data = imm;
}

static void wr_send_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
	struct ibv_send_wr *w = wr_new(x, IBV_WR_SEND_WITH_INV);

	if (w)
		w->invalidate_rkey = rkey;
}

static void wr_local_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
	struct ibv_send_wr *w = wr_new(x, IBV_WR_LOCAL_INV);

	if (w)
		w->invalidate_rkey = rkey;
}

static void wr_rdma(struct ibv_qp_ex *x, enum ibv_wr_opcode op, uint32_t rkey,
		    uint64_t raddr, __be32 imm)
{
	struct ibv_send_wr *w = wr_new(x, op);

	if (!w)
		return;
	w->wr.rdma.rkey = rkey;
	w->wr.rdma.remote_addr = raddr;
	w->imm_data = imm;
}

static void wr_rdma_read(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr)
{
	wr_rdma(x, IBV_WR_RDMA_READ, rkey, raddr, 0);
}

static void wr_rdma_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr)
{
	wr_rdma(x, IBV_WR_RDMA_WRITE, rkey, raddr, 0);
}

static void wr_rdma_write_imm(struct ibv_qp_ex *x, uint32_t rkey,
			      uint64_t raddr, __be32 imm)
{
	wr_rdma(x, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, raddr, imm);
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *x, uint32_t rkey,
			      uint64_t raddr, uint64_t compare, uint64_t swap)
{
	struct ibv_send_wr *w = wr_new(x, IBV_WR_ATOMIC_CMP_AND_SWP);

	if (!w)
		return;
	w->wr.atomic.rkey = rkey;
	w->wr.atomic.remote_addr = raddr;
	w->wr.atomic.compare_add = compare;
	w->wr.atomic.swap = swap;
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *x, uint32_t rkey,
				uint64_t raddr, uint64_t add)
{
	struct ibv_send_wr *w = wr_new(x, IBV_WR_ATOMIC_FETCH_AND_ADD);

	if (!w)
		return;
	w->wr.atomic.rkey = rkey;
	w->wr.atomic.remote_addr = raddr;
	w->wr.atomic.compare_add = add;
}

static void wr_unsupported(struct ibv_qp_ex *x)
{
	struct shca_wr_batch *b = QPX(x)->batch;

	if (b && !b->err)
		b->err = EOPNOTSUPP;
}

static void wr_bind_mw(struct ibv_qp_ex *x, struct ibv_mw *mw, uint32_t rkey,
		       const struct ibv_mw_bind_info *info)
{
	(void)mw; (void)rkey; (void)info;
	wr_unsupported(x);
}

static void wr_send_tso(struct ibv_qp_ex *x, void *hdr, uint16_t hdr_sz,
			uint16_t mss)
{
	(void)hdr; (void)hdr_sz; (void)mss;
	wr_unsupported(x);
}

static void wr_set_xrc_srqn(struct ibv_qp_ex *x, uint32_t srqn)
{
	(void)srqn;
	wr_unsupported(x);
}

static void wr_atomic_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr,
			    const void *data)
{
	(void)rkey; (void)raddr; (void)data;
	wr_unsupported(x);
}

static void wr_set_ud_addr(struct ibv_qp_ex *x, struct ibv_ah *ah,
			   uint32_t qpn, uint32_t qkey)
{
	struct ibv_send_wr *w = wr_cur(x);

	if (!w)
		return;
	w->wr.ud.ah = ah;
	w->wr.ud.remote_qpn = qpn;
	w->wr.ud.remote_qkey = qkey;
}

static void wr_set_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr,
		       uint32_t length)
{
	struct shca_wr_batch *b = QPX(x)->batch;
	struct ibv_send_wr *w = wr_cur(x);

	if (!w)
		return;
	b->sge[b->n - 1].lkey = lkey;
	b->sge[b->n - 1].addr = addr;
	b->sge[b->n - 1].length = length;
	w->sg_list = &b->sge[b->n - 1];
	w->num_sge = 1;
}

static void wr_set_sge_list(struct ibv_qp_ex *x, size_t n,
			    const struct ibv_sge *list)
{
	struct shca_wr_batch *b = QPX(x)->batch;
	struct ibv_send_wr *w = wr_cur(x);
	struct ibv_sge *copy;

	if (!w)
		return;
	if (n == 0) {
		w->sg_list = NULL;
		w->num_sge = 0;
		return;
	}
	copy = malloc(n * sizeof(*copy));
	if (!copy) {
		b->err = ENOMEM;
		return;
	}
	memcpy(copy, list, n * sizeof(*copy));
	b->sgl[b->n - 1] = copy;
	w->sg_list = copy;
	w->num_sge = (int)n;
}

/* Inline data is copied now, as ibv_wr_set_inline_data(3) allows the
 * buffer's reuse on return; the copy is posted with IBV_SEND_INLINE. */
static void wr_set_inline_data_list(struct ibv_qp_ex *x, size_t n,
				    const struct ibv_data_buf *bufs)
{
	struct shca_wr_batch *b = QPX(x)->batch;
	struct ibv_send_wr *w = wr_cur(x);
	size_t i, total = 0;
	char *data;

	if (!w)
		return;
	for (i = 0; i < n; i++)
		total += bufs[i].length;
	data = malloc(total ? total : 1);
	if (!data) {
		b->err = ENOMEM;
		return;
	}
	for (i = 0, total = 0; i < n; i++) {
		memcpy(data + total, bufs[i].addr, bufs[i].length);
		total += bufs[i].length;
	}
	b->sgl[b->n - 1] = (struct ibv_sge *)data; /* freed with the batch */
	b->sge[b->n - 1].addr = (uintptr_t)data;
	b->sge[b->n - 1].length = total;
	b->sge[b->n - 1].lkey = 0;
	w->sg_list = &b->sge[b->n - 1];
	w->num_sge = 1;
	w->send_flags |= IBV_SEND_INLINE;
}

static void wr_set_inline_data(struct ibv_qp_ex *x, void *addr, size_t length)
{
	struct ibv_data_buf buf = { .addr = addr, .length = length };

	wr_set_inline_data_list(x, 1, &buf);
}

static void qpx_init(struct shca_qp *q)
{
	struct ibv_qp_ex *x = &q->qpx;

	q->is_ex = 1;
	x->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
	x->wr_atomic_fetch_add = wr_atomic_fetch_add;
	x->wr_bind_mw = wr_bind_mw;
	x->wr_local_inv = wr_local_inv;
	x->wr_rdma_read = wr_rdma_read;
	x->wr_rdma_write = wr_rdma_write;
	x->wr_rdma_write_imm = wr_rdma_write_imm;
	x->wr_send = wr_send;
	x->wr_send_imm = wr_send_imm;
	x->wr_send_inv = wr_send_inv;
	x->wr_send_tso = wr_send_tso;
	x->wr_set_ud_addr = wr_set_ud_addr;
	x->wr_set_xrc_srqn = wr_set_xrc_srqn;
	x->wr_set_inline_data = wr_set_inline_data;
	x->wr_set_inline_data_list = wr_set_inline_data_list;
	x->wr_set_sge = wr_set_sge;
	x->wr_set_sge_list = wr_set_sge_list;
	x->wr_start = wr_start;
	x->wr_complete = wr_complete;
	x->wr_abort = wr_abort;
	x->wr_atomic_write = wr_atomic_write;
}

/* --------------------------------------------------------------------- AH */

EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct shca_ah *a;
	int err = 0;

	if (!pd || !attr)
		return null_err(EINVAL);
	a = calloc(1, sizeof(*a));
	if (!a)
		return null_err(ENOMEM);
	a->h = shca_go_create_ah(PD(pd)->h, attr, &err);
	if (!a->h) {
		free(a);
		return null_err(err);
	}
	a->ah.context = pd->context;
	a->ah.pd = pd;
	return &a->ah;
}

EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	int err;

	if (!ah)
		return ret_err(EINVAL);
	err = shca_go_destroy_ah(AH(ah)->h);
	if (err)
		return ret_err(err);
	free(AH(ah));
	return 0;
}

/* find_gid_index returns the index of a RoCEv2 GID of the port, or -1. */
static int find_gid_index(struct ibv_context *context, uint8_t port_num,
			  const union ibv_gid *gid)
{
	union ibv_gid g;
	int i;

	for (i = 0;; i++) {
		if (shca_go_query_gid(CTX(context)->h, port_num, i, &g)) {
			errno = ENOENT;
			return -1;
		}
		if (!memcmp(&g, gid, sizeof(g)) &&
		    !shca_go_gid_in_use(CTX(context)->h, port_num, i))
			return i;
	}
}

static void v4mapped(uint32_t be_addr, union ibv_gid *gid)
{
	memset(gid, 0, sizeof(*gid));
	gid->raw[10] = 0xff;
	gid->raw[11] = 0xff;
	memcpy(&gid->raw[12], &be_addr, 4);
}

/* The IP version of a RoCEv2 receive's 40-byte header area: an IPv6
 * header, or an IPv4 header in its last 20 bytes (rdma-core's rule: an
 * IPv6 version nibble with a valid IPv4 header checksum behind it is
 * IPv4). */
static int grh_version(const struct ibv_grh *grh)
{
	const uint8_t *ip4 = (const uint8_t *)grh + 20;
	uint32_t sum = 0;
	int i;

	if (((be32toh(grh->version_tclass_flow) >> 28) & 0xf) != 6)
		return (ip4[0] >> 4) == 4 ? 4 : -1;
	if ((ip4[0] & 0xf) != 5)
		return 6;
	for (i = 0; i < 20; i += 2)
		sum += (uint32_t)ip4[i] << 8 | ip4[i + 1];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return sum == 0xffff ? 4 : 6;
}

/* ibv_init_ah_from_wc as rdma-core does it for RoCE: the reply goes to
 * the header's source, from the local GID the packet was sent to. */
EXPORT int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num,
			       struct ibv_wc *wc, struct ibv_grh *grh,
			       struct ibv_ah_attr *ah_attr)
{
	const uint8_t *ip4;
	uint32_t saddr, daddr;
	union ibv_gid sgid;
	int idx;

	if (!context || !wc || !ah_attr || !grh) {
		errno = EINVAL;
		return -1;
	}
	memset(ah_attr, 0, sizeof(*ah_attr));
	ah_attr->grh.flow_label = be32toh(grh->version_tclass_flow) & 0xfffff;
	ah_attr->dlid = wc->slid;
	ah_attr->sl = wc->sl;
	ah_attr->src_path_bits = wc->dlid_path_bits;
	ah_attr->port_num = port_num;
	if (!(wc->wc_flags & IBV_WC_GRH))
		return 0;
	ah_attr->is_global = 1;
	switch (grh_version(grh)) {
	case 4:
		ip4 = (const uint8_t *)grh + 20;
		memcpy(&saddr, ip4 + 12, 4);
		memcpy(&daddr, ip4 + 16, 4);
		if ((be32toh(daddr) >> 28) == 0xe) {
			errno = EINVAL; /* multicast: not in the GID table */
			return -1;
		}
		v4mapped(daddr, &sgid);
		idx = find_gid_index(context, port_num, &sgid);
		if (idx < 0)
			return -1;
		v4mapped(saddr, &ah_attr->grh.dgid);
		ah_attr->grh.sgid_index = idx;
		ah_attr->grh.hop_limit = ip4[8];
		ah_attr->grh.traffic_class = ip4[1];
		return 0;
	case 6:
		if (grh->dgid.raw[0] == 0xff) {
			errno = EINVAL;
			return -1;
		}
		if (grh->next_hdr != IPPROTO_UDP) {
			errno = EPROTONOSUPPORT; /* RoCEv1: softhca has only v2 GIDs */
			return -1;
		}
		idx = find_gid_index(context, port_num, &grh->dgid);
		if (idx < 0)
			return -1;
		ah_attr->grh.dgid = grh->sgid;
		ah_attr->grh.sgid_index = idx;
		ah_attr->grh.hop_limit = grh->hop_limit;
		ah_attr->grh.traffic_class = (be32toh(grh->version_tclass_flow) >> 20) & 0xff;
		return 0;
	default:
		errno = EPROTONOSUPPORT;
		return -1;
	}
}

EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd,
					    struct ibv_wc *wc,
					    struct ibv_grh *grh,
					    uint8_t port_num)
{
	struct ibv_ah_attr a;

	if (!pd)
		return null_err(EINVAL);
	if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &a))
		return NULL;
	return ibv_create_ah(pd, &a);
}

/* A softhca peer's MAC is not known (the link is UDP): the locally
 * administered MAC softhca derives from an IPv4 address, 02:00 and its
 * four bytes, as its node GUID is; other addresses get no MAC. */
EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *context,
				       struct ibv_ah_attr *attr,
				       uint8_t eth_mac[6], uint16_t *vid)
{
	const uint8_t *g;

	/* rdma-core returns a negative errno here */
	if (!context || !attr || !eth_mac)
		return -EINVAL;
	g = attr->grh.dgid.raw;
	if (!attr->is_global || memcmp(g, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12))
		return -EHOSTUNREACH; /* only IPv4 peers have a derived MAC */
	if (vid)
		*vid = 0xffff; /* no VLAN */
	eth_mac[0] = 0x02;
	eth_mac[1] = 0x00;
	memcpy(eth_mac + 2, g + 12, 4);
	return 0;
}

/* ------------------------------------------------------------ fork, sysfs */

static int g_fork_init;

EXPORT int ibv_fork_init(void)
{
	/* The engine never hands memory to a device, so fork does not
	 * corrupt registered memory; but a Go runtime does not survive
	 * fork without exec in the child, which the README says. */
	g_fork_init = 1;
	return 0;
}

EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return g_fork_init ? IBV_FORK_ENABLED : IBV_FORK_DISABLED;
}

EXPORT int ibv_dontfork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

EXPORT int ibv_dofork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

EXPORT const char *ibv_get_sysfs_path(void)
{
	static char *path;
	const char *env = NULL;
	size_t len;

	if (path)
		return path;
	/* As rdma-core: the environment only when not running set-uid, and
	 * without trailing slashes. */
	if (getuid() == geteuid())
		env = getenv("SYSFS_PATH");
	if (!env)
		return "/sys";
	path = strndup(env, IBV_SYSFS_PATH_MAX);
	if (!path)
		return "/sys";
	len = strlen(path);
	while (len > 0 && path[len - 1] == '/')
		path[--len] = '\0';
	return path;
}

EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf,
			       size_t size)
{
	char *path;
	ssize_t len;
	int fd;

	if (!dir || !file || !buf || !size) {
		errno = EINVAL;
		return -1;
	}
	if (asprintf(&path, "%s/%s", dir, file) < 0)
		return -1;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	free(path);
	if (fd < 0)
		return -1;
	len = read(fd, buf, size);
	close(fd);
	if (len > 0) {
		if (buf[len - 1] == '\n')
			buf[--len] = '\0';
		else if ((size_t)len < size)
			buf[len] = '\0';
		else
			return -1; /* no room for the terminator: rdma-core fails */
	}
	return len;
}

/* ------------------------------------------------------------ strings */

EXPORT const char *ibv_node_type_str(enum ibv_node_type t)
{
	static const char *const s[] = {
		[IBV_NODE_CA] = "InfiniBand channel adapter",
		[IBV_NODE_SWITCH] = "InfiniBand switch",
		[IBV_NODE_ROUTER] = "InfiniBand router",
		[IBV_NODE_RNIC] = "iWARP NIC",
		[IBV_NODE_USNIC] = "usNIC",
		[IBV_NODE_USNIC_UDP] = "usNIC UDP",
		[IBV_NODE_UNSPECIFIED] = "unspecified",
	};

	if ((int)t < 0 || (size_t)t >= sizeof(s) / sizeof(s[0]) || !s[t])
		return "unknown";
	return s[t];
}

EXPORT const char *ibv_port_state_str(enum ibv_port_state s)
{
	static const char *const n[] = {
		[IBV_PORT_NOP] = "no state change (NOP)",
		[IBV_PORT_DOWN] = "down",
		[IBV_PORT_INIT] = "init",
		[IBV_PORT_ARMED] = "armed",
		[IBV_PORT_ACTIVE] = "active",
		[IBV_PORT_ACTIVE_DEFER] = "active defer",
	};

	if ((int)s < 0 || (size_t)s >= sizeof(n) / sizeof(n[0]))
		return "unknown";
	return n[s];
}

EXPORT const char *ibv_event_type_str(enum ibv_event_type e)
{
	static const char *const n[] = {
		[IBV_EVENT_CQ_ERR] = "CQ error",
		[IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
		[IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
		[IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
		[IBV_EVENT_COMM_EST] = "communication established",
		[IBV_EVENT_SQ_DRAINED] = "send queue drained",
		[IBV_EVENT_PATH_MIG] = "path migrated",
		[IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
		[IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
		[IBV_EVENT_PORT_ACTIVE] = "port active",
		[IBV_EVENT_PORT_ERR] = "port error",
		[IBV_EVENT_LID_CHANGE] = "LID change",
		[IBV_EVENT_PKEY_CHANGE] = "P_Key change",
		[IBV_EVENT_SM_CHANGE] = "SM change",
		[IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
		[IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
		[IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
		[IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
		[IBV_EVENT_GID_CHANGE] = "GID table change",
		[IBV_EVENT_WQ_FATAL] = "WQ fatal",
	};

	if ((int)e < 0 || (size_t)e >= sizeof(n) / sizeof(n[0]) || !n[e])
		return "unknown";
	return n[e];
}

EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	static const char *const n[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
		[IBV_WC_MW_BIND_ERR] = "memory management operation error",
		[IBV_WC_BAD_RESP_ERR] = "bad response error",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "aborted error",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
		[IBV_WC_GENERAL_ERR] = "general error",
		[IBV_WC_TM_ERR] = "TM error",
		[IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
	};

	if ((int)status < 0 || (size_t)status >= sizeof(n) / sizeof(n[0]) ||
	    !n[status])
		return "unknown";
	return n[status];
}

/* ------------------------------------------------------------- rates */

/* The rates libibverbs knows: their multiple of 2.5 Gb/s (0 for the
 * rates that are not a multiple: FDR, EDR and the like) and their
 * signalling rate in Mb/s, as rdma-core 44's tables. */
static const struct {
	enum ibv_rate rate;
	int mult;
	int mbps;
} rates[] = {
	{ IBV_RATE_2_5_GBPS, 1, 2500 },	    { IBV_RATE_5_GBPS, 2, 5000 },
	{ IBV_RATE_10_GBPS, 4, 10000 },	    { IBV_RATE_20_GBPS, 8, 20000 },
	{ IBV_RATE_30_GBPS, 12, 30000 },    { IBV_RATE_40_GBPS, 16, 40000 },
	{ IBV_RATE_60_GBPS, 24, 60000 },    { IBV_RATE_80_GBPS, 32, 80000 },
	{ IBV_RATE_120_GBPS, 48, 120000 },  { IBV_RATE_14_GBPS, 0, 14062 },
	{ IBV_RATE_56_GBPS, 0, 56250 },	    { IBV_RATE_112_GBPS, 0, 112500 },
	{ IBV_RATE_168_GBPS, 0, 168750 },   { IBV_RATE_25_GBPS, 0, 25781 },
	{ IBV_RATE_100_GBPS, 0, 103125 },   { IBV_RATE_200_GBPS, 0, 206250 },
	{ IBV_RATE_300_GBPS, 0, 309375 },   { IBV_RATE_28_GBPS, 11, 28125 },
	{ IBV_RATE_50_GBPS, 20, 53125 },    { IBV_RATE_400_GBPS, 160, 425000 },
	{ IBV_RATE_600_GBPS, 240, 637500 }, { IBV_RATE_800_GBPS, 320, 850000 },
	{ IBV_RATE_1200_GBPS, 480, 1275000 },
};
#define NRATES (sizeof(rates) / sizeof(rates[0]))

EXPORT int ibv_rate_to_mult(enum ibv_rate rate)
{
	size_t i;

	for (i = 0; i < NRATES; i++)
		if (rates[i].rate == rate && rates[i].mult)
			return rates[i].mult;
	return -1;
}

EXPORT enum ibv_rate mult_to_ibv_rate(int mult)
{
	size_t i;

	for (i = 0; i < NRATES && mult > 0; i++)
		if (rates[i].mult == mult)
			return rates[i].rate;
	return IBV_RATE_MAX;
}

EXPORT int ibv_rate_to_mbps(enum ibv_rate rate)
{
	size_t i;

	for (i = 0; i < NRATES; i++)
		if (rates[i].rate == rate)
			return rates[i].mbps;
	return -1;
}

EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps)
{
	size_t i;

	for (i = 0; i < NRATES; i++)
		if (rates[i].mbps == mbps)
			return rates[i].rate;
	return IBV_RATE_MAX;
}

/* ------------------------------------------------- kernel ABI copy helpers */

EXPORT void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst,
				       struct ib_uverbs_ah_attr *src)
{
	memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof(dst->grh.dgid));
	dst->grh.flow_label = src->grh.flow_label;
	dst->grh.sgid_index = src->grh.sgid_index;
	dst->grh.hop_limit = src->grh.hop_limit;
	dst->grh.traffic_class = src->grh.traffic_class;
	dst->dlid = src->dlid;
	dst->sl = src->sl;
	dst->src_path_bits = src->src_path_bits;
	dst->static_rate = src->static_rate;
	dst->is_global = src->is_global;
	dst->port_num = src->port_num;
}

EXPORT void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst,
				       struct ib_uverbs_qp_attr *src)
{
	dst->cur_qp_state = src->cur_qp_state;
	dst->path_mtu = src->path_mtu;
	dst->path_mig_state = src->path_mig_state;
	dst->qkey = src->qkey;
	dst->rq_psn = src->rq_psn;
	dst->sq_psn = src->sq_psn;
	dst->dest_qp_num = src->dest_qp_num;
	dst->qp_access_flags = src->qp_access_flags;
	dst->cap.max_send_wr = src->max_send_wr;
	dst->cap.max_recv_wr = src->max_recv_wr;
	dst->cap.max_send_sge = src->max_send_sge;
	dst->cap.max_recv_sge = src->max_recv_sge;
	dst->cap.max_inline_data = src->max_inline_data;
	ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
	ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);
	dst->pkey_index = src->pkey_index;
	dst->alt_pkey_index = src->alt_pkey_index;
	dst->en_sqd_async_notify = src->en_sqd_async_notify;
	dst->sq_draining = src->sq_draining;
	dst->max_rd_atomic = src->max_rd_atomic;
	dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
	dst->min_rnr_timer = src->min_rnr_timer;
	dst->port_num = src->port_num;
	dst->timeout = src->timeout;
	dst->retry_cnt = src->retry_cnt;
	dst->rnr_retry = src->rnr_retry;
	dst->alt_port_num = src->alt_port_num;
	dst->alt_timeout = src->alt_timeout;
}

EXPORT void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst,
					struct ib_user_path_rec *src)
{
	memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid));
	memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid));
	dst->dlid = src->dlid;
	dst->slid = src->slid;
	dst->raw_traffic = src->raw_traffic;
	dst->flow_label = src->flow_label;
	dst->hop_limit = src->hop_limit;
	dst->traffic_class = src->traffic_class;
	dst->reversible = src->reversible;
	dst->numb_path = src->numb_path;
	dst->pkey = src->pkey;
	dst->sl = src->sl;
	dst->mtu_selector = src->mtu_selector;
	dst->mtu = src->mtu;
	dst->rate_selector = src->rate_selector;
	dst->rate = src->rate;
	dst->packet_life_time = src->packet_life_time;
	dst->preference = src->preference;
	dst->packet_life_time_selector = src->packet_life_time_selector;
}

EXPORT void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst,
				      struct ibv_sa_path_rec *src)
{
	memcpy(dst->dgid, src->dgid.raw, sizeof(src->dgid));
	memcpy(dst->sgid, src->sgid.raw, sizeof(src->sgid));
	dst->dlid = src->dlid;
	dst->slid = src->slid;
	dst->raw_traffic = src->raw_traffic;
	dst->flow_label = src->flow_label;
	dst->hop_limit = src->hop_limit;
	dst->traffic_class = src->traffic_class;
	dst->reversible = src->reversible;
	dst->numb_path = src->numb_path;
	dst->pkey = src->pkey;
	dst->sl = src->sl;
	dst->mtu_selector = src->mtu_selector;
	dst->mtu = src->mtu;
	dst->rate_selector = src->rate_selector;
	dst->rate = src->rate;
	dst->packet_life_time = src->packet_life_time;
	dst->preference = src->preference;
	dst->packet_life_time_selector = src->packet_life_time_selector;
}

/* ibv_register_driver@IBVERBS_1.1 (hidden): the old provider entry. A
 * provider registering itself is ignored: no provider drives a softhca
 * device. */
void shca_register_driver(const char *name, void *init_func)
{
	(void)name;
	(void)init_func;
}
__asm__(".symver shca_register_driver, ibv_register_driver@IBVERBS_1.1");

/* The default versions of the names defined under another name above. */
#undef ibv_ack_async_event
__asm__(".symver shca_ibv_ack_async_event_1_1, ibv_ack_async_event@@IBVERBS_1.1");
#undef ibv_ack_cq_events
__asm__(".symver shca_ibv_ack_cq_events_1_1, ibv_ack_cq_events@@IBVERBS_1.1");
#undef ibv_alloc_pd
__asm__(".symver shca_ibv_alloc_pd_1_1, ibv_alloc_pd@@IBVERBS_1.1");
#undef ibv_attach_mcast
__asm__(".symver shca_ibv_attach_mcast_1_1, ibv_attach_mcast@@IBVERBS_1.1");
#undef ibv_close_device
__asm__(".symver shca_ibv_close_device_1_1, ibv_close_device@@IBVERBS_1.1");
#undef ibv_create_ah
__asm__(".symver shca_ibv_create_ah_1_1, ibv_create_ah@@IBVERBS_1.1");
#undef ibv_create_cq
__asm__(".symver shca_ibv_create_cq_1_1, ibv_create_cq@@IBVERBS_1.1");
#undef ibv_create_qp
__asm__(".symver shca_ibv_create_qp_1_1, ibv_create_qp@@IBVERBS_1.1");
#undef ibv_create_srq
__asm__(".symver shca_ibv_create_srq_1_1, ibv_create_srq@@IBVERBS_1.1");
#undef ibv_dealloc_pd
__asm__(".symver shca_ibv_dealloc_pd_1_1, ibv_dealloc_pd@@IBVERBS_1.1");
#undef ibv_dereg_mr
__asm__(".symver shca_ibv_dereg_mr_1_1, ibv_dereg_mr@@IBVERBS_1.1");
#undef ibv_destroy_ah
__asm__(".symver shca_ibv_destroy_ah_1_1, ibv_destroy_ah@@IBVERBS_1.1");
#undef ibv_destroy_cq
__asm__(".symver shca_ibv_destroy_cq_1_1, ibv_destroy_cq@@IBVERBS_1.1");
#undef ibv_destroy_qp
__asm__(".symver shca_ibv_destroy_qp_1_1, ibv_destroy_qp@@IBVERBS_1.1");
#undef ibv_destroy_srq
__asm__(".symver shca_ibv_destroy_srq_1_1, ibv_destroy_srq@@IBVERBS_1.1");
#undef ibv_detach_mcast
__asm__(".symver shca_ibv_detach_mcast_1_1, ibv_detach_mcast@@IBVERBS_1.1");
#undef ibv_free_device_list
__asm__(".symver shca_ibv_free_device_list_1_1, ibv_free_device_list@@IBVERBS_1.1");
#undef ibv_get_async_event
__asm__(".symver shca_ibv_get_async_event_1_1, ibv_get_async_event@@IBVERBS_1.1");
#undef ibv_get_cq_event
__asm__(".symver shca_ibv_get_cq_event_1_1, ibv_get_cq_event@@IBVERBS_1.1");
#undef ibv_get_device_guid
__asm__(".symver shca_ibv_get_device_guid_1_1, ibv_get_device_guid@@IBVERBS_1.1");
#undef ibv_get_device_list
__asm__(".symver shca_ibv_get_device_list_1_1, ibv_get_device_list@@IBVERBS_1.1");
#undef ibv_get_device_name
__asm__(".symver shca_ibv_get_device_name_1_1, ibv_get_device_name@@IBVERBS_1.1");
#undef ibv_modify_qp
__asm__(".symver shca_ibv_modify_qp_1_1, ibv_modify_qp@@IBVERBS_1.1");
#undef ibv_modify_srq
__asm__(".symver shca_ibv_modify_srq_1_1, ibv_modify_srq@@IBVERBS_1.1");
#undef ibv_open_device
__asm__(".symver shca_ibv_open_device_1_1, ibv_open_device@@IBVERBS_1.1");
#undef ibv_query_device
__asm__(".symver shca_ibv_query_device_1_1, ibv_query_device@@IBVERBS_1.1");
#undef ibv_query_gid
__asm__(".symver shca_ibv_query_gid_1_1, ibv_query_gid@@IBVERBS_1.1");
#undef ibv_query_pkey
__asm__(".symver shca_ibv_query_pkey_1_1, ibv_query_pkey@@IBVERBS_1.1");
#undef ibv_query_port
__asm__(".symver shca_ibv_query_port_1_1, ibv_query_port@@IBVERBS_1.1");
#undef ibv_query_qp
__asm__(".symver shca_ibv_query_qp_1_1, ibv_query_qp@@IBVERBS_1.1");
#undef ibv_query_srq
__asm__(".symver shca_ibv_query_srq_1_1, ibv_query_srq@@IBVERBS_1.1");
#undef ibv_reg_mr
__asm__(".symver shca_ibv_reg_mr_1_1, ibv_reg_mr@@IBVERBS_1.1");
#undef ibv_resize_cq
__asm__(".symver shca_ibv_resize_cq_1_1, ibv_resize_cq@@IBVERBS_1.1");
