//go:build ignore

// (agent.c is not part of the Go build: package rdma embeds it and compiles it with cc.)

/*
 * shca-verbs-agent: the C half of softhca's conformance backend for any
 * libibverbs device (package conformance/rdma; its doc.go describes the
 * protocol this file implements, record by record).
 *
 *   cc -O2 -Wall -Werror -o shca-verbs-agent agent.c -libverbs
 *   shca-verbs-agent DEVICE      (fd 3: a SOCK_SEQPACKET unix socket)
 *
 * One thread, one loop: receive a request on fd 3, make the verb call it
 * names, send one response. The agent never blocks in a verb: the
 * completion channels' fds and the async fd are non-blocking, and every
 * event taken is acknowledged at once (the Go side keeps the application's
 * acknowledgement counts), so no ibv_destroy_* waits. It exits when the
 * socket closes.
 *
 * Objects are named by handles, indexes into one table (never reused).
 * A CQ's, QP's and SRQ's context pointer holds its handle, so events
 * name objects by handle without a search.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <endian.h>
#include <infiniband/verbs.h>

_Static_assert(sizeof(((struct ibv_device_attr *)0)->fw_ver) == 64,
	       "the device record's fw_ver is 64 bytes");

#define PROTO_VERSION 1
#define SOCK_FD 3
#define MAX_MSG (192 * 1024)

enum op {
	OP_HELLO = 1,
	OP_QUERY_DEVICE,
	OP_QUERY_PORT,
	OP_QUERY_GID,
	OP_QUERY_PKEY,
	OP_ALLOC_PD,
	OP_DEALLOC_PD,
	OP_REG_MR,
	OP_DEREG_MR,
	OP_CREATE_CHANNEL,
	OP_DESTROY_CHANNEL,
	OP_CREATE_CQ,
	OP_DESTROY_CQ,
	OP_RESIZE_CQ,
	OP_REQ_NOTIFY_CQ,
	OP_POLL_CQ,
	OP_GET_CQ_EVENT,
	OP_GET_ASYNC_EVENT,
	OP_CREATE_SRQ,
	OP_MODIFY_SRQ,
	OP_QUERY_SRQ,
	OP_DESTROY_SRQ,
	OP_POST_SRQ_RECV,
	OP_POST_SRQ_OPS,
	OP_CREATE_AH,
	OP_DESTROY_AH,
	OP_CREATE_QP,
	OP_QUERY_QP,
	OP_MODIFY_QP,
	OP_POST_SEND,
	OP_POST_RECV,
	OP_ATTACH_MCAST,
	OP_DETACH_MCAST,
	OP_DESTROY_QP,
};

/* REG_MR's kinds of buffer. */
enum { MR_NIL = 0, MR_EMPTY = 1, MR_MEMFD = 2 };

/* GET_ASYNC_EVENT's kinds of element. */
enum { EV_NONE = 0, EV_CQ, EV_QP, EV_SRQ, EV_PORT };

/* ----------------------------------------------------------- records */

/* A reader over a request; reading past the end sets bad and reads 0. */
struct rd {
	const uint8_t *p;
	size_t n, off;
	int bad;
};

static uint64_t get(struct rd *r, int size)
{
	uint64_t v = 0;
	int i;

	if (r->bad || r->n - r->off < (size_t)size) {
		r->bad = 1;
		return 0;
	}
	for (i = 0; i < size; i++)
		v |= (uint64_t)r->p[r->off + i] << (8 * i);
	r->off += size;
	return v;
}

static uint8_t get8(struct rd *r) { return (uint8_t)get(r, 1); }
static uint16_t get16(struct rd *r) { return (uint16_t)get(r, 2); }
static uint32_t get32(struct rd *r) { return (uint32_t)get(r, 4); }
static uint64_t get64(struct rd *r) { return get(r, 8); }

static void getbytes(struct rd *r, void *dst, size_t n)
{
	if (r->bad || r->n - r->off < n) {
		r->bad = 1;
		memset(dst, 0, n);
		return;
	}
	memcpy(dst, r->p + r->off, n);
	r->off += n;
}

/* A writer of a response; the buffer is MAX_MSG bytes. */
struct wr {
	uint8_t *p;
	size_t off;
	int bad;
};

static void put(struct wr *w, uint64_t v, int size)
{
	int i;

	if (w->bad || MAX_MSG - w->off < (size_t)size) {
		w->bad = 1;
		return;
	}
	for (i = 0; i < size; i++)
		w->p[w->off + i] = (uint8_t)(v >> (8 * i));
	w->off += size;
}

static void put8(struct wr *w, uint8_t v) { put(w, v, 1); }
static void put16(struct wr *w, uint16_t v) { put(w, v, 2); }
static void put32(struct wr *w, uint32_t v) { put(w, v, 4); }
static void put64(struct wr *w, uint64_t v) { put(w, v, 8); }

static void putbytes(struct wr *w, const void *src, size_t n)
{
	if (w->bad || MAX_MSG - w->off < n) {
		w->bad = 1;
		return;
	}
	memcpy(w->p + w->off, src, n);
	w->off += n;
}

/* ------------------------------------------------------------ objects */

enum kind { K_FREE, K_PD, K_MR, K_CHAN, K_CQ, K_SRQ, K_AH, K_QP };

struct obj {
	enum kind kind;
	void *p;	/* the ibv_ object */
	void *map;	/* MR: the mapping of the runner's memfd */
	size_t maplen;
	struct ibv_cq_ex *cqx; /* CQ created with ibv_create_cq_ex */
};

static struct obj *objs; /* objs[0] is never used: handle 0 is NULL */
static uint32_t nobjs, capobjs;

static uint32_t add_obj(enum kind k, void *p)
{
	if (nobjs == capobjs) {
		uint32_t c = capobjs ? 2 * capobjs : 64;
		struct obj *n = realloc(objs, c * sizeof(*n));

		if (!n) {
			fprintf(stderr, "shca-verbs-agent: out of memory\n");
			exit(2);
		}
		memset(n + capobjs, 0, (c - capobjs) * sizeof(*n));
		objs = n;
		capobjs = c;
		if (nobjs == 0)
			nobjs = 1;
	}
	objs[nobjs].kind = k;
	objs[nobjs].p = p;
	return nobjs++;
}

/*
 * obj looks a handle up. Handle 0 is NULL (ok stays set); a handle that
 * names nothing of the kind clears ok.
 */
static struct obj *obj(uint32_t h, enum kind k, int *ok)
{
	if (h == 0)
		return NULL;
	if (h >= nobjs || objs[h].kind != k) {
		*ok = 0;
		return NULL;
	}
	return &objs[h];
}

static void *ptr(uint32_t h, enum kind k, int *ok)
{
	struct obj *o = obj(h, k, ok);

	return o ? o->p : NULL;
}

static struct ibv_cq *cq_of(uint32_t h, int *ok)
{
	struct obj *o = obj(h, K_CQ, ok);

	if (!o)
		return NULL;
	return o->cqx ? ibv_cq_ex_to_cq(o->cqx) : o->p;
}

/* ------------------------------------------------------------- device */

static struct ibv_context *ctx;
static int tm_capable;		/* tm_caps.flags has IBV_TM_CAP_RC */
static struct ibv_device_attr_ex dev_attr;
static int dev_attr_done;
static uint32_t max_inline;

/* errno_of turns a verb's return value into an errno: 0 stays 0, -1
 * means errno, any other negative value is -errno, a positive one is the
 * errno itself. */
static int errno_of(int ret)
{
	if (ret == 0)
		return 0;
	if (ret == -1)
		return errno ? errno : EINVAL;
	return ret < 0 ? -ret : ret;
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return errno;
	return 0;
}

/*
 * probe_max_inline finds the largest max_inline_data an RC QP can be
 * created with (struct ibv_device_attr does not have it): a device that
 * clamps writes its limit back; one that refuses is searched.
 */
static uint32_t probe_max_inline(void)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 1, NULL, NULL, 0) : NULL;
	uint32_t lo = 0, hi = 1 << 16, got = 0;
	struct ibv_qp *qp;
	struct ibv_qp_init_attr a;

	if (!cq)
		goto out;
	memset(&a, 0, sizeof(a));
	a.send_cq = a.recv_cq = cq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = a.cap.max_recv_wr = 1;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	a.cap.max_inline_data = hi;
	qp = ibv_create_qp(pd, &a);
	if (qp) {
		got = a.cap.max_inline_data;
		ibv_destroy_qp(qp);
		goto out;
	}
	/* Invariant: lo is accepted (or 0), hi is refused. */
	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;

		a.cap.max_inline_data = mid;
		a.cap.max_send_wr = a.cap.max_recv_wr = 1;
		a.cap.max_send_sge = a.cap.max_recv_sge = 1;
		qp = ibv_create_qp(pd, &a);
		if (qp) {
			ibv_destroy_qp(qp);
			lo = mid;
		} else {
			hi = mid;
		}
	}
	got = lo;
out:
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	return got;
}

static void query_device_once(void)
{
	if (dev_attr_done)
		return;
	memset(&dev_attr, 0, sizeof(dev_attr));
	if (ibv_query_device_ex(ctx, NULL, &dev_attr) != 0) {
		memset(&dev_attr, 0, sizeof(dev_attr));
		if (ibv_query_device(ctx, &dev_attr.orig_attr) != 0)
			return;
	}
	tm_capable = (dev_attr.tm_caps.flags & IBV_TM_CAP_RC) != 0 &&
		     dev_attr.tm_caps.max_num_tags > 0;
	max_inline = probe_max_inline();
	dev_attr_done = 1;
}

static void put_ah(struct wr *w, const struct ibv_ah_attr *a)
{
	putbytes(w, a->grh.dgid.raw, 16);
	put32(w, a->grh.flow_label);
	put8(w, a->grh.sgid_index);
	put8(w, a->grh.hop_limit);
	put8(w, a->grh.traffic_class);
	put16(w, a->dlid);
	put8(w, a->sl);
	put8(w, a->src_path_bits);
	put8(w, a->static_rate);
	put8(w, a->is_global);
	put8(w, a->port_num);
}

static void get_ah(struct rd *r, struct ibv_ah_attr *a)
{
	memset(a, 0, sizeof(*a));
	getbytes(r, a->grh.dgid.raw, 16);
	a->grh.flow_label = get32(r);
	a->grh.sgid_index = get8(r);
	a->grh.hop_limit = get8(r);
	a->grh.traffic_class = get8(r);
	a->dlid = get16(r);
	a->sl = get8(r);
	a->src_path_bits = get8(r);
	a->static_rate = get8(r);
	a->is_global = get8(r);
	a->port_num = get8(r);
}

static void put_cap(struct wr *w, const struct ibv_qp_cap *c)
{
	put32(w, c->max_send_wr);
	put32(w, c->max_recv_wr);
	put32(w, c->max_send_sge);
	put32(w, c->max_recv_sge);
	put32(w, c->max_inline_data);
}

static void get_cap(struct rd *r, struct ibv_qp_cap *c)
{
	c->max_send_wr = get32(r);
	c->max_recv_wr = get32(r);
	c->max_send_sge = get32(r);
	c->max_recv_sge = get32(r);
	c->max_inline_data = get32(r);
}

static void put_qp_attr(struct wr *w, const struct ibv_qp_attr *a)
{
	put8(w, a->qp_state);
	put8(w, a->cur_qp_state);
	put8(w, a->path_mtu);
	put8(w, a->path_mig_state);
	put32(w, a->qkey);
	put32(w, a->rq_psn);
	put32(w, a->sq_psn);
	put32(w, a->dest_qp_num);
	put32(w, a->qp_access_flags);
	put_cap(w, &a->cap);
	put_ah(w, &a->ah_attr);
	put_ah(w, &a->alt_ah_attr);
	put16(w, a->pkey_index);
	put16(w, a->alt_pkey_index);
	put8(w, a->en_sqd_async_notify);
	put8(w, a->sq_draining);
	put8(w, a->max_rd_atomic);
	put8(w, a->max_dest_rd_atomic);
	put8(w, a->min_rnr_timer);
	put8(w, a->port_num);
	put8(w, a->timeout);
	put8(w, a->retry_cnt);
	put8(w, a->rnr_retry);
	put8(w, a->alt_port_num);
	put8(w, a->alt_timeout);
	put32(w, a->rate_limit);
}

static void get_qp_attr(struct rd *r, struct ibv_qp_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = get8(r);
	a->cur_qp_state = get8(r);
	a->path_mtu = get8(r);
	a->path_mig_state = get8(r);
	a->qkey = get32(r);
	a->rq_psn = get32(r);
	a->sq_psn = get32(r);
	a->dest_qp_num = get32(r);
	a->qp_access_flags = get32(r);
	get_cap(r, &a->cap);
	get_ah(r, &a->ah_attr);
	get_ah(r, &a->alt_ah_attr);
	a->pkey_index = get16(r);
	a->alt_pkey_index = get16(r);
	a->en_sqd_async_notify = get8(r);
	a->sq_draining = get8(r);
	a->max_rd_atomic = get8(r);
	a->max_dest_rd_atomic = get8(r);
	a->min_rnr_timer = get8(r);
	a->port_num = get8(r);
	a->timeout = get8(r);
	a->retry_cnt = get8(r);
	a->rnr_retry = get8(r);
	a->alt_port_num = get8(r);
	a->alt_timeout = get8(r);
	a->rate_limit = get32(r);
}

static void put_wc(struct wr *w, const struct ibv_wc *wc, uint64_t tag,
		   uint32_t priv)
{
	uint32_t imm = 0;

	if (wc->wc_flags & IBV_WC_WITH_INV)
		imm = wc->invalidated_rkey;
	else if (wc->wc_flags & IBV_WC_WITH_IMM)
		imm = ntohl(wc->imm_data);
	put64(w, wc->wr_id);
	put32(w, wc->status);
	put32(w, wc->opcode);
	put32(w, wc->vendor_err);
	put32(w, wc->byte_len);
	put32(w, imm);
	put32(w, wc->qp_num);
	put32(w, wc->src_qp);
	put32(w, wc->wc_flags);
	put16(w, wc->pkey_index);
	put16(w, wc->slid);
	put8(w, wc->sl);
	put8(w, wc->dlid_path_bits);
	put64(w, tag);
	put32(w, priv);
}

/* An SGE list: u32 count, then (u64 addr, u32 length, u32 lkey) each. */
static struct ibv_sge *get_sges(struct rd *r, int *num)
{
	uint32_t n = get32(r), i;
	struct ibv_sge *s;

	*num = 0;
	if (r->bad || n > (r->n - r->off) / 16) {
		r->bad = 1;
		return NULL;
	}
	if (n == 0)
		return NULL;
	s = calloc(n, sizeof(*s));
	if (!s) {
		r->bad = 1;
		return NULL;
	}
	for (i = 0; i < n; i++) {
		s[i].addr = get64(r);
		s[i].length = get32(r);
		s[i].lkey = get32(r);
	}
	*num = (int)n;
	return s;
}

/* A list of n work requests and their SGE arrays, freed together. */
struct list {
	void *wrs;
	struct ibv_sge **sges;
	uint32_t n;
};

static void free_list(struct list *l)
{
	uint32_t i;

	for (i = 0; l->sges && i < l->n; i++)
		free(l->sges[i]);
	free(l->sges);
	free(l->wrs);
}

static int alloc_list(struct rd *r, struct list *l, size_t wr_size,
		      size_t min_record)
{
	memset(l, 0, sizeof(*l));
	l->n = get32(r);
	if (r->bad || l->n == 0 || l->n > (r->n - r->off) / min_record)
		return EINVAL;
	l->wrs = calloc(l->n, wr_size);
	l->sges = calloc(l->n, sizeof(*l->sges));
	if (!l->wrs || !l->sges)
		return ENOMEM;
	return 0;
}

/* The index of bad in a list of n elements of size sz at base, or -1. */
static int32_t index_of(const void *bad, const void *base, size_t sz,
			uint32_t n)
{
	const char *b = bad, *s = base;

	if (!bad || b < s || b >= s + (size_t)n * sz || (b - s) % sz)
		return -1;
	return (int32_t)((b - s) / sz);
}

/* ----------------------------------------------------------- handlers */

/* Each handler reads its request from r and writes its response body to
 * w; it returns the errno the response carries. *fd_out, when set to an
 * fd, is passed back with the response. fd_in is the fd that came with
 * the request, or -1; a handler that keeps it sets it to -1. */

static int h_hello(struct wr *w, int *fd_out)
{
	put32(w, PROTO_VERSION);
	*fd_out = ctx->async_fd;
	return 0;
}

static int h_query_device(struct wr *w)
{
	const struct ibv_device_attr *a = &dev_attr.orig_attr;
	char fw[sizeof(a->fw_ver)];

	query_device_once();
	if (!dev_attr_done)
		return EIO;
	memcpy(fw, a->fw_ver, sizeof(fw));
	fw[sizeof(fw) - 1] = 0;
	putbytes(w, fw, sizeof(fw));
	put64(w, be64toh(a->node_guid));
	put64(w, be64toh(a->sys_image_guid));
	put64(w, a->max_mr_size);
	put64(w, a->page_size_cap);
	put32(w, a->vendor_id);
	put32(w, a->vendor_part_id);
	put32(w, a->hw_ver);
	put32(w, a->max_qp);
	put32(w, a->max_qp_wr);
	put32(w, a->device_cap_flags);
	put32(w, a->max_sge);
	put32(w, a->max_sge_rd);
	put32(w, a->max_cq);
	put32(w, a->max_cqe);
	put32(w, a->max_mr);
	put32(w, a->max_pd);
	put32(w, a->max_qp_rd_atom);
	put32(w, a->max_ee_rd_atom);
	put32(w, a->max_res_rd_atom);
	put32(w, a->max_qp_init_rd_atom);
	put32(w, a->max_ee_init_rd_atom);
	put32(w, a->atomic_cap);
	put32(w, a->max_ee);
	put32(w, a->max_rdd);
	put32(w, a->max_mw);
	put32(w, a->max_raw_ipv6_qp);
	put32(w, a->max_raw_ethy_qp);
	put32(w, a->max_mcast_grp);
	put32(w, a->max_mcast_qp_attach);
	put32(w, a->max_total_mcast_qp_attach);
	put32(w, a->max_ah);
	put32(w, a->max_fmr);
	put32(w, a->max_map_per_fmr);
	put32(w, a->max_srq);
	put32(w, a->max_srq_wr);
	put32(w, a->max_srq_sge);
	put16(w, a->max_pkeys);
	put8(w, a->local_ca_ack_delay);
	put8(w, a->phys_port_cnt);
	put32(w, max_inline);
	put32(w, dev_attr.tm_caps.max_rndv_hdr_size);
	put32(w, dev_attr.tm_caps.max_num_tags);
	put32(w, dev_attr.tm_caps.flags);
	put32(w, dev_attr.tm_caps.max_ops);
	put32(w, dev_attr.tm_caps.max_sge);
	return 0;
}

static int h_query_port(struct rd *r, struct wr *w)
{
	uint8_t port = get8(r);
	struct ibv_port_attr a;
	int err;

	if (r->bad)
		return EINVAL;
	memset(&a, 0, sizeof(a));
	err = errno_of(ibv_query_port(ctx, port, &a));
	if (err)
		return err;
	put8(w, a.state);
	put8(w, a.max_mtu);
	put8(w, a.active_mtu);
	put32(w, (uint32_t)a.gid_tbl_len);
	put32(w, a.port_cap_flags);
	put32(w, a.max_msg_sz);
	put32(w, a.bad_pkey_cntr);
	put32(w, a.qkey_viol_cntr);
	put16(w, a.pkey_tbl_len);
	put16(w, a.lid);
	put16(w, a.sm_lid);
	put8(w, a.lmc);
	put8(w, a.max_vl_num);
	put8(w, a.sm_sl);
	put8(w, a.subnet_timeout);
	put8(w, a.init_type_reply);
	put8(w, a.active_width);
	put8(w, a.active_speed);
	put8(w, a.phys_state);
	put8(w, a.link_layer);
	return 0;
}

static int h_query_gid(struct rd *r, struct wr *w)
{
	uint8_t port = get8(r);
	int index = (int32_t)get32(r);
	union ibv_gid g;
	int err;

	if (r->bad)
		return EINVAL;
	memset(&g, 0, sizeof(g));
	err = errno_of(ibv_query_gid(ctx, port, index, &g));
	if (err)
		return err;
	putbytes(w, g.raw, 16);
	return 0;
}

static int h_query_pkey(struct rd *r, struct wr *w)
{
	uint8_t port = get8(r);
	int index = (int32_t)get32(r);
	__be16 k = 0;
	int err;

	if (r->bad)
		return EINVAL;
	err = errno_of(ibv_query_pkey(ctx, port, index, &k));
	if (err)
		return err;
	put16(w, ntohs(k));
	return 0;
}

static int h_alloc_pd(struct wr *w)
{
	struct ibv_pd *pd;

	errno = 0;
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		return errno ? errno : ENOMEM;
	put32(w, add_obj(K_PD, pd));
	return 0;
}

/* h_destroy releases the object a handle names with the verb of its kind. */
static int h_destroy(struct rd *r, enum kind k)
{
	uint32_t h = get32(r);
	int ok = 1, err = 0;
	struct obj *o = obj(h, k, &ok);

	if (r->bad || !ok || !o)
		return EINVAL;
	errno = 0;
	switch (k) {
	case K_PD:
		err = errno_of(ibv_dealloc_pd(o->p));
		break;
	case K_MR:
		err = errno_of(ibv_dereg_mr(o->p));
		if (!err && o->map)
			munmap(o->map, o->maplen);
		break;
	case K_CHAN:
		err = errno_of(ibv_destroy_comp_channel(o->p));
		break;
	case K_CQ:
		err = errno_of(ibv_destroy_cq(o->cqx ? ibv_cq_ex_to_cq(o->cqx) : o->p));
		break;
	case K_SRQ:
		err = errno_of(ibv_destroy_srq(o->p));
		break;
	case K_AH:
		err = errno_of(ibv_destroy_ah(o->p));
		break;
	case K_QP:
		err = errno_of(ibv_destroy_qp(o->p));
		break;
	case K_FREE:
		err = EINVAL;
		break;
	}
	if (!err)
		memset(o, 0, sizeof(*o));
	return err;
}

static char empty_buf[1];

static int h_reg_mr(struct rd *r, struct wr *w, int *fd_in)
{
	int ok = 1;
	struct ibv_pd *pd = ptr(get32(r), K_PD, &ok);
	int access = (int)get32(r);
	uint64_t len = get64(r);
	uint32_t pageoff = get32(r);
	uint8_t kind = get8(r);
	void *map = NULL, *addr = NULL;
	size_t maplen = 0;
	struct ibv_mr *mr;
	uint32_t h;

	if (r->bad || !ok)
		return EINVAL;
	switch (kind) {
	case MR_NIL:
		break;
	case MR_EMPTY:
		addr = empty_buf;
		break;
	case MR_MEMFD:
		if (*fd_in < 0)
			return EBADF;
		maplen = (size_t)pageoff + (size_t)len;
		map = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, *fd_in, 0);
		if (map == MAP_FAILED)
			return errno;
		addr = (char *)map + pageoff;
		break;
	default:
		return EINVAL;
	}
	errno = 0;
	mr = ibv_reg_mr(pd, addr, len, access);
	if (!mr) {
		int err = errno ? errno : EINVAL;

		if (map)
			munmap(map, maplen);
		return err;
	}
	h = add_obj(K_MR, mr);
	objs[h].map = map;
	objs[h].maplen = maplen;
	put32(w, h);
	put64(w, (uint64_t)(uintptr_t)mr->addr);
	put32(w, mr->lkey);
	put32(w, mr->rkey);
	put64(w, mr->length);
	return 0;
}

static int h_create_channel(struct wr *w, int *fd_out)
{
	struct ibv_comp_channel *ch;
	int err;

	errno = 0;
	ch = ibv_create_comp_channel(ctx);
	if (!ch)
		return errno ? errno : ENOMEM;
	err = set_nonblock(ch->fd);
	if (err) {
		ibv_destroy_comp_channel(ch);
		return err;
	}
	put32(w, add_obj(K_CHAN, ch));
	*fd_out = ch->fd;
	return 0;
}

static int h_create_cq(struct rd *r, struct wr *w)
{
	int cqe = (int32_t)get32(r), ok = 1;
	struct ibv_comp_channel *ch = ptr(get32(r), K_CHAN, &ok);
	int vector = (int32_t)get32(r);
	uint32_t h;
	struct ibv_cq *cq;

	if (r->bad || !ok)
		return EINVAL;
	query_device_once();
	h = add_obj(K_FREE, NULL);
	errno = 0;
	if (tm_capable) {
		/* Tag-matching completions carry tm_info, which only the
		 * extended CQ reports. */
		struct ibv_cq_init_attr_ex a;
		struct ibv_cq_ex *x;

		memset(&a, 0, sizeof(a));
		a.cqe = cqe;
		a.cq_context = (void *)(uintptr_t)h;
		a.channel = ch;
		a.comp_vector = vector;
		a.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_TM_INFO;
		x = ibv_create_cq_ex(ctx, &a);
		if (!x)
			return errno ? errno : EINVAL;
		objs[h].cqx = x;
		cq = ibv_cq_ex_to_cq(x);
	} else {
		cq = ibv_create_cq(ctx, cqe, (void *)(uintptr_t)h, ch, vector);
		if (!cq)
			return errno ? errno : EINVAL;
		objs[h].p = cq;
	}
	objs[h].kind = K_CQ;
	put32(w, h);
	put32(w, (uint32_t)cq->cqe);
	return 0;
}

static int h_resize_cq(struct rd *r, struct wr *w)
{
	int ok = 1;
	struct ibv_cq *cq = cq_of(get32(r), &ok);
	int cqe = (int32_t)get32(r), err;

	if (r->bad || !ok || !cq)
		return EINVAL;
	errno = 0;
	err = errno_of(ibv_resize_cq(cq, cqe));
	if (err)
		return err;
	put32(w, (uint32_t)cq->cqe);
	return 0;
}

static int h_req_notify(struct rd *r)
{
	int ok = 1;
	struct ibv_cq *cq = cq_of(get32(r), &ok);
	int solicited = get8(r);

	if (r->bad || !ok || !cq)
		return EINVAL;
	errno = 0;
	return errno_of(ibv_req_notify_cq(cq, solicited));
}

#define MAX_POLL 1024

static int h_poll_cq(struct rd *r, struct wr *w)
{
	uint32_t h = get32(r), n = get32(r), got = 0;
	int ok = 1;
	struct obj *o = obj(h, K_CQ, &ok);
	size_t count_at;

	if (r->bad || !ok || !o)
		return EINVAL;
	if (n > MAX_POLL)
		n = MAX_POLL;
	count_at = w->off;
	put32(w, 0);
	if (o->cqx) {
		struct ibv_cq_ex *x = o->cqx;
		struct ibv_poll_cq_attr pa = { .comp_mask = 0 };
		int ret;

		if (n == 0)
			goto done;
		ret = ibv_start_poll(x, &pa);
		if (ret == ENOENT)
			goto done;
		if (ret)
			return ret;
		for (;;) {
			struct ibv_wc wc;
			struct ibv_wc_tm_info tm = { 0 };
			unsigned int flags = ibv_wc_read_wc_flags(x);

			memset(&wc, 0, sizeof(wc));
			wc.wr_id = x->wr_id;
			wc.status = x->status;
			wc.opcode = ibv_wc_read_opcode(x);
			wc.vendor_err = ibv_wc_read_vendor_err(x);
			wc.byte_len = ibv_wc_read_byte_len(x);
			if (flags & IBV_WC_WITH_INV)
				wc.invalidated_rkey = ibv_wc_read_invalidated_rkey(x);
			else if (flags & IBV_WC_WITH_IMM)
				wc.imm_data = ibv_wc_read_imm_data(x);
			wc.qp_num = ibv_wc_read_qp_num(x);
			wc.src_qp = ibv_wc_read_src_qp(x);
			wc.wc_flags = flags;
			wc.slid = ibv_wc_read_slid(x);
			wc.sl = ibv_wc_read_sl(x);
			wc.dlid_path_bits = ibv_wc_read_dlid_path_bits(x);
			ibv_wc_read_tm_info(x, &tm);
			put_wc(w, &wc, tm.tag, tm.priv);
			if (++got == n || ibv_next_poll(x) != 0)
				break;
		}
		ibv_end_poll(x);
	} else {
		struct ibv_wc wcs[64];

		while (got < n) {
			int want = n - got > 64 ? 64 : (int)(n - got), k, i;

			k = ibv_poll_cq(o->p, want, wcs);
			if (k < 0) {
				if (got == 0)
					return errno_of(k);
				break;
			}
			for (i = 0; i < k; i++)
				put_wc(w, &wcs[i], 0, 0);
			got += k;
			if (k < want)
				break;
		}
	}
done:
	w->p[count_at] = got & 0xff;
	w->p[count_at + 1] = (got >> 8) & 0xff;
	w->p[count_at + 2] = (got >> 16) & 0xff;
	w->p[count_at + 3] = (got >> 24) & 0xff;
	return 0;
}

static int h_get_cq_event(struct rd *r, struct wr *w)
{
	int ok = 1;
	struct ibv_comp_channel *ch = ptr(get32(r), K_CHAN, &ok);
	struct ibv_cq *cq;
	void *cq_ctx;

	if (r->bad || !ok || !ch)
		return EINVAL;
	errno = 0;
	if (ibv_get_cq_event(ch, &cq, &cq_ctx) != 0)
		return errno ? errno : EIO;
	ibv_ack_cq_events(cq, 1);
	put32(w, (uint32_t)(uintptr_t)cq_ctx);
	return 0;
}

static int h_get_async_event(struct wr *w)
{
	struct ibv_async_event e;
	uint8_t kind = EV_NONE, port = 0;
	uint32_t h = 0;

	errno = 0;
	if (ibv_get_async_event(ctx, &e) != 0)
		return errno ? errno : EIO;
	switch (e.event_type) {
	case IBV_EVENT_CQ_ERR:
		kind = EV_CQ;
		h = (uint32_t)(uintptr_t)e.element.cq->cq_context;
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		kind = EV_QP;
		h = (uint32_t)(uintptr_t)e.element.qp->qp_context;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		kind = EV_SRQ;
		h = (uint32_t)(uintptr_t)e.element.srq->srq_context;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		kind = EV_PORT;
		port = (uint8_t)e.element.port_num;
		break;
	default:
		break;
	}
	put32(w, e.event_type);
	put8(w, kind);
	put32(w, h);
	put8(w, port);
	ibv_ack_async_event(&e);
	return 0;
}

static int h_create_srq(struct rd *r, struct wr *w)
{
	int ok = 1;
	struct ibv_pd *pd = ptr(get32(r), K_PD, &ok);
	struct ibv_srq_attr attr;
	uint8_t tm;
	uint32_t tags, ops, h;
	struct ibv_cq *cq;
	struct ibv_srq *srq;

	attr.max_wr = get32(r);
	attr.max_sge = get32(r);
	attr.srq_limit = get32(r);
	tm = get8(r);
	tags = get32(r);
	ops = get32(r);
	cq = cq_of(get32(r), &ok);
	if (r->bad || !ok)
		return EINVAL;
	h = add_obj(K_FREE, NULL);
	errno = 0;
	if (tm) {
		struct ibv_srq_init_attr_ex a;

		memset(&a, 0, sizeof(a));
		a.srq_context = (void *)(uintptr_t)h;
		a.attr = attr;
		a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TM;
		a.srq_type = IBV_SRQT_TM;
		a.pd = pd;
		if (cq) {
			a.comp_mask |= IBV_SRQ_INIT_ATTR_CQ;
			a.cq = cq;
		}
		a.tm_cap.max_num_tags = tags;
		a.tm_cap.max_ops = ops;
		srq = ibv_create_srq_ex(ctx, &a);
	} else {
		struct ibv_srq_init_attr a;

		memset(&a, 0, sizeof(a));
		a.srq_context = (void *)(uintptr_t)h;
		a.attr = attr;
		srq = ibv_create_srq(pd, &a);
	}
	if (!srq)
		return errno ? errno : EINVAL;
	objs[h].kind = K_SRQ;
	objs[h].p = srq;
	put32(w, h);
	return 0;
}

static int h_modify_srq(struct rd *r)
{
	int ok = 1;
	struct ibv_srq *srq = ptr(get32(r), K_SRQ, &ok);
	int mask = (int)get32(r);
	struct ibv_srq_attr a;

	a.max_wr = get32(r);
	a.max_sge = get32(r);
	a.srq_limit = get32(r);
	if (r->bad || !ok || !srq)
		return EINVAL;
	errno = 0;
	return errno_of(ibv_modify_srq(srq, &a, mask));
}

static int h_query_srq(struct rd *r, struct wr *w)
{
	int ok = 1, err;
	struct ibv_srq *srq = ptr(get32(r), K_SRQ, &ok);
	struct ibv_srq_attr a;

	if (r->bad || !ok || !srq)
		return EINVAL;
	memset(&a, 0, sizeof(a));
	errno = 0;
	err = errno_of(ibv_query_srq(srq, &a));
	if (err)
		return err;
	put32(w, a.max_wr);
	put32(w, a.max_sge);
	put32(w, a.srq_limit);
	return 0;
}

/* Receive WRs: u32 count, then (u64 wr_id, SGE list) each. */
static int get_recv_list(struct rd *r, struct list *l)
{
	struct ibv_recv_wr *wrs;
	uint32_t i;
	int err = alloc_list(r, l, sizeof(struct ibv_recv_wr), 12);

	if (err)
		return err;
	wrs = l->wrs;
	for (i = 0; i < l->n; i++) {
		wrs[i].wr_id = get64(r);
		l->sges[i] = get_sges(r, &wrs[i].num_sge);
		wrs[i].sg_list = l->sges[i];
		wrs[i].next = i + 1 < l->n ? &wrs[i + 1] : NULL;
	}
	return r->bad ? EINVAL : 0;
}

static int h_post_recv(struct rd *r, struct wr *w, int srq)
{
	int ok = 1, err;
	void *o = ptr(get32(r), srq ? K_SRQ : K_QP, &ok);
	struct ibv_recv_wr *bad = NULL;
	struct list l;

	if (r->bad || !ok || !o)
		return EINVAL;
	err = get_recv_list(r, &l);
	if (!err) {
		errno = 0;
		if (srq)
			err = errno_of(ibv_post_srq_recv(o, l.wrs, &bad));
		else
			err = errno_of(ibv_post_recv(o, l.wrs, &bad));
		put32(w, (uint32_t)index_of(bad, l.wrs, sizeof(struct ibv_recv_wr), l.n));
	}
	free_list(&l);
	return err;
}

/* Send WRs: u32 count, then each: u64 wr_id, u32 opcode, u32 send_flags,
 * u32 imm_data (host order), u32 invalidate_rkey, u64 rdma remote_addr,
 * u32 rdma rkey, u64 atomic remote_addr, u64 compare_add, u64 swap, u32
 * atomic rkey, u32 ah handle, u32 remote_qpn, u32 remote_qkey, SGE list. */
static int h_post_send(struct rd *r, struct wr *w)
{
	int ok = 1, err;
	struct ibv_qp *qp = ptr(get32(r), K_QP, &ok);
	struct ibv_send_wr *wrs, *bad = NULL;
	struct list l;
	uint32_t i;

	if (r->bad || !ok || !qp)
		return EINVAL;
	err = alloc_list(r, &l, sizeof(struct ibv_send_wr), 80);
	if (err)
		goto out;
	wrs = l.wrs;
	for (i = 0; i < l.n; i++) {
		struct ibv_send_wr *s = &wrs[i];
		uint32_t imm, inv, rkey, arkey, ah;
		uint64_t raddr, aaddr, cmp, swp;
		uint32_t rqpn, rqkey;

		s->wr_id = get64(r);
		s->opcode = get32(r);
		s->send_flags = get32(r);
		imm = get32(r);
		inv = get32(r);
		raddr = get64(r);
		rkey = get32(r);
		aaddr = get64(r);
		cmp = get64(r);
		swp = get64(r);
		arkey = get32(r);
		ah = get32(r);
		rqpn = get32(r);
		rqkey = get32(r);
		l.sges[i] = get_sges(r, &s->num_sge);
		s->sg_list = l.sges[i];
		s->next = i + 1 < l.n ? &wrs[i + 1] : NULL;
		if (s->opcode == IBV_WR_SEND_WITH_INV || s->opcode == IBV_WR_LOCAL_INV)
			s->invalidate_rkey = inv;
		else
			s->imm_data = htonl(imm);
		if (qp->qp_type == IBV_QPT_UD) {
			s->wr.ud.ah = ptr(ah, K_AH, &ok);
			s->wr.ud.remote_qpn = rqpn;
			s->wr.ud.remote_qkey = rqkey;
		} else if (s->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
			   s->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			s->wr.atomic.remote_addr = aaddr;
			s->wr.atomic.compare_add = cmp;
			s->wr.atomic.swap = swp;
			s->wr.atomic.rkey = arkey;
		} else {
			s->wr.rdma.remote_addr = raddr;
			s->wr.rdma.rkey = rkey;
		}
	}
	if (r->bad || !ok) {
		err = EINVAL;
		goto out;
	}
	errno = 0;
	err = errno_of(ibv_post_send(qp, wrs, &bad));
	put32(w, (uint32_t)index_of(bad, wrs, sizeof(*wrs), l.n));
out:
	free_list(&l);
	return err;
}

/* Ops WRs: u32 count, then each: u64 wr_id, u32 opcode, u32 flags, u32
 * unexpected_cnt, u32 handle, u64 recv_wr_id, u64 tag, u64 mask, SGE
 * list. The response gives the failed index and every op's handle. */
static int h_post_srq_ops(struct rd *r, struct wr *w)
{
	int ok = 1, err;
	struct ibv_srq *srq = ptr(get32(r), K_SRQ, &ok);
	struct ibv_ops_wr *ops, *bad = NULL;
	struct list l;
	uint32_t i;

	if (r->bad || !ok || !srq)
		return EINVAL;
	err = alloc_list(r, &l, sizeof(struct ibv_ops_wr), 52);
	if (err)
		goto out;
	ops = l.wrs;
	for (i = 0; i < l.n; i++) {
		struct ibv_ops_wr *o = &ops[i];

		o->wr_id = get64(r);
		o->opcode = get32(r);
		o->flags = (int)get32(r);
		o->tm.unexpected_cnt = get32(r);
		o->tm.handle = get32(r);
		o->tm.add.recv_wr_id = get64(r);
		o->tm.add.tag = get64(r);
		o->tm.add.mask = get64(r);
		l.sges[i] = get_sges(r, &o->tm.add.num_sge);
		o->tm.add.sg_list = l.sges[i];
		o->next = i + 1 < l.n ? &ops[i + 1] : NULL;
	}
	if (r->bad) {
		err = EINVAL;
		goto out;
	}
	errno = 0;
	err = errno_of(ibv_post_srq_ops(srq, ops, &bad));
	put32(w, (uint32_t)index_of(bad, ops, sizeof(*ops), l.n));
	put32(w, l.n);
	for (i = 0; i < l.n; i++)
		put32(w, ops[i].tm.handle);
out:
	free_list(&l);
	return err;
}

static int h_create_ah(struct rd *r, struct wr *w)
{
	int ok = 1;
	struct ibv_pd *pd = ptr(get32(r), K_PD, &ok);
	struct ibv_ah_attr a;
	struct ibv_ah *ah;

	get_ah(r, &a);
	if (r->bad || !ok)
		return EINVAL;
	errno = 0;
	ah = ibv_create_ah(pd, &a);
	if (!ah)
		return errno ? errno : EINVAL;
	put32(w, add_obj(K_AH, ah));
	return 0;
}

static int h_create_qp(struct rd *r, struct wr *w)
{
	int ok = 1;
	struct ibv_pd *pd = ptr(get32(r), K_PD, &ok);
	struct ibv_qp_init_attr a;
	struct ibv_qp *qp;
	uint32_t h;

	memset(&a, 0, sizeof(a));
	a.send_cq = cq_of(get32(r), &ok);
	a.recv_cq = cq_of(get32(r), &ok);
	a.srq = ptr(get32(r), K_SRQ, &ok);
	get_cap(r, &a.cap);
	a.qp_type = get8(r);
	a.sq_sig_all = get8(r);
	if (r->bad || !ok)
		return EINVAL;
	h = add_obj(K_FREE, NULL);
	a.qp_context = (void *)(uintptr_t)h;
	errno = 0;
	qp = ibv_create_qp(pd, &a);
	if (!qp)
		return errno ? errno : EINVAL;
	objs[h].kind = K_QP;
	objs[h].p = qp;
	put32(w, h);
	put32(w, qp->qp_num);
	put_cap(w, &a.cap);
	return 0;
}

static int h_query_qp(struct rd *r, struct wr *w)
{
	int ok = 1, err;
	struct ibv_qp *qp = ptr(get32(r), K_QP, &ok);
	int mask = (int)get32(r);
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr init;

	if (r->bad || !ok || !qp)
		return EINVAL;
	memset(&a, 0, sizeof(a));
	memset(&init, 0, sizeof(init));
	errno = 0;
	err = errno_of(ibv_query_qp(qp, &a, mask, &init));
	if (err)
		return err;
	put_qp_attr(w, &a);
	return 0;
}

static int h_modify_qp(struct rd *r)
{
	int ok = 1;
	struct ibv_qp *qp = ptr(get32(r), K_QP, &ok);
	int mask = (int)get32(r);
	struct ibv_qp_attr a;

	get_qp_attr(r, &a);
	if (r->bad || !ok || !qp)
		return EINVAL;
	errno = 0;
	return errno_of(ibv_modify_qp(qp, &a, mask));
}

static int h_mcast(struct rd *r, int attach)
{
	int ok = 1;
	struct ibv_qp *qp = ptr(get32(r), K_QP, &ok);
	union ibv_gid g;
	uint16_t lid;

	getbytes(r, g.raw, 16);
	lid = get16(r);
	if (r->bad || !ok || !qp)
		return EINVAL;
	errno = 0;
	if (attach)
		return errno_of(ibv_attach_mcast(qp, &g, lid));
	return errno_of(ibv_detach_mcast(qp, &g, lid));
}

static int dispatch(uint32_t op, struct rd *r, struct wr *w, int *fd_in,
		    int *fd_out)
{
	switch (op) {
	case OP_HELLO: return h_hello(w, fd_out);
	case OP_QUERY_DEVICE: return h_query_device(w);
	case OP_QUERY_PORT: return h_query_port(r, w);
	case OP_QUERY_GID: return h_query_gid(r, w);
	case OP_QUERY_PKEY: return h_query_pkey(r, w);
	case OP_ALLOC_PD: return h_alloc_pd(w);
	case OP_DEALLOC_PD: return h_destroy(r, K_PD);
	case OP_REG_MR: return h_reg_mr(r, w, fd_in);
	case OP_DEREG_MR: return h_destroy(r, K_MR);
	case OP_CREATE_CHANNEL: return h_create_channel(w, fd_out);
	case OP_DESTROY_CHANNEL: return h_destroy(r, K_CHAN);
	case OP_CREATE_CQ: return h_create_cq(r, w);
	case OP_DESTROY_CQ: return h_destroy(r, K_CQ);
	case OP_RESIZE_CQ: return h_resize_cq(r, w);
	case OP_REQ_NOTIFY_CQ: return h_req_notify(r);
	case OP_POLL_CQ: return h_poll_cq(r, w);
	case OP_GET_CQ_EVENT: return h_get_cq_event(r, w);
	case OP_GET_ASYNC_EVENT: return h_get_async_event(w);
	case OP_CREATE_SRQ: return h_create_srq(r, w);
	case OP_MODIFY_SRQ: return h_modify_srq(r);
	case OP_QUERY_SRQ: return h_query_srq(r, w);
	case OP_DESTROY_SRQ: return h_destroy(r, K_SRQ);
	case OP_POST_SRQ_RECV: return h_post_recv(r, w, 1);
	case OP_POST_SRQ_OPS: return h_post_srq_ops(r, w);
	case OP_CREATE_AH: return h_create_ah(r, w);
	case OP_DESTROY_AH: return h_destroy(r, K_AH);
	case OP_CREATE_QP: return h_create_qp(r, w);
	case OP_QUERY_QP: return h_query_qp(r, w);
	case OP_MODIFY_QP: return h_modify_qp(r);
	case OP_POST_SEND: return h_post_send(r, w);
	case OP_POST_RECV: return h_post_recv(r, w, 0);
	case OP_ATTACH_MCAST: return h_mcast(r, 1);
	case OP_DETACH_MCAST: return h_mcast(r, 0);
	case OP_DESTROY_QP: return h_destroy(r, K_QP);
	}
	return ENOSYS;
}

/* ---------------------------------------------------------------- main */

static int open_device(const char *name)
{
	struct ibv_device **list;
	int i, n = 0;

	list = ibv_get_device_list(&n);
	if (!list) {
		fprintf(stderr, "shca-verbs-agent: ibv_get_device_list: %s\n", strerror(errno));
		return -1;
	}
	for (i = 0; i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), name) == 0)
			break;
	if (i == n) {
		fprintf(stderr, "shca-verbs-agent: no device %s among the %d libibverbs found:", name, n);
		for (i = 0; i < n; i++)
			fprintf(stderr, " %s", ibv_get_device_name(list[i]));
		fprintf(stderr, "\n");
		ibv_free_device_list(list);
		return -1;
	}
	ctx = ibv_open_device(list[i]);
	if (!ctx) {
		fprintf(stderr, "shca-verbs-agent: ibv_open_device %s: %s\n", name, strerror(errno));
		ibv_free_device_list(list);
		return -1;
	}
	ibv_free_device_list(list);
	if (set_nonblock(ctx->async_fd) != 0) {
		fprintf(stderr, "shca-verbs-agent: async_fd O_NONBLOCK: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

static uint8_t req_buf[MAX_MSG], resp_buf[MAX_MSG];

static int is_post(uint32_t op)
{
	return op == OP_POST_SEND || op == OP_POST_RECV ||
	       op == OP_POST_SRQ_RECV || op == OP_POST_SRQ_OPS;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: shca-verbs-agent DEVICE (driven over fd 3 by softhca's conformance/rdma)\n");
		return 2;
	}
	if (open_device(argv[1]) != 0)
		return 1;
	for (;;) {
		char cbuf[CMSG_SPACE(sizeof(int))];
		struct iovec iov = { req_buf, sizeof(req_buf) };
		struct msghdr m = { 0 };
		struct cmsghdr *c;
		struct rd r = { 0 };
		struct wr w = { 0 };
		int fd_in = -1, fd_out = -1, err;
		uint32_t op;
		ssize_t n;

		m.msg_iov = &iov;
		m.msg_iovlen = 1;
		m.msg_control = cbuf;
		m.msg_controllen = sizeof(cbuf);
		n = recvmsg(SOCK_FD, &m, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n == 0 ? 0 : 1;
		for (c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
			    c->cmsg_len >= CMSG_LEN(sizeof(int)))
				memcpy(&fd_in, CMSG_DATA(c), sizeof(int));
		r.p = req_buf;
		r.n = (size_t)n;
		w.p = resp_buf;
		put32(&w, 0); /* the errno, filled in below */
		op = get32(&r);
		err = (m.msg_flags & MSG_TRUNC) ? E2BIG : dispatch(op, &r, &w, &fd_in, &fd_out);
		if (w.bad)
			err = E2BIG;
		/* A failed call's body is empty, but for the posts: their
		 * refused index (and srq_ops' handles) come with the error. */
		if (err && (w.bad || !is_post(op)))
			w.off = 4;
		if (err)
			fd_out = -1;
		resp_buf[0] = err & 0xff;
		resp_buf[1] = (err >> 8) & 0xff;
		resp_buf[2] = (err >> 16) & 0xff;
		resp_buf[3] = (err >> 24) & 0xff;
		if (fd_in >= 0)
			close(fd_in);
		{
			struct iovec oiov = { resp_buf, w.off };
			struct msghdr om = { 0 };
			char ocbuf[CMSG_SPACE(sizeof(int))];

			om.msg_iov = &oiov;
			om.msg_iovlen = 1;
			if (fd_out >= 0) {
				memset(ocbuf, 0, sizeof(ocbuf));
				om.msg_control = ocbuf;
				om.msg_controllen = sizeof(ocbuf);
				c = CMSG_FIRSTHDR(&om);
				c->cmsg_level = SOL_SOCKET;
				c->cmsg_type = SCM_RIGHTS;
				c->cmsg_len = CMSG_LEN(sizeof(int));
				memcpy(CMSG_DATA(c), &fd_out, sizeof(int));
			}
			while ((n = sendmsg(SOCK_FD, &om, MSG_NOSIGNAL)) < 0 && errno == EINTR)
				;
			if (n < 0)
				return 1;
		}
	}
}
