/*
 * The C half of softhca's drop-in libibverbs.so.1: the objects the
 * application sees. Each wraps the struct verbs.h defines (first, so that
 * the application's pointer is the wrapper's) and the handle of its Go
 * half (handles.go), through which shim.c calls the engine.
 */
#ifndef SHCA_SHIM_H
#define SHCA_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

typedef uintptr_t shca_handle;

/*
 * The device. rdma-core keeps a struct verbs_device around ibv_device
 * whose next field is the provider's ops; providers' *dv_is_supported
 * read it, so it is there and NULL: no provider owns a softhca device.
 */
struct shca_device {
	struct ibv_device dev;
	const void *provider_ops;
	uint64_t guid;
	int index;
};

/* The context: verbs_context must end with the ibv_context itself. */
struct shca_context {
	shca_handle h;
	struct shca_device *sdev;
	struct verbs_context vctx;
};

struct shca_pd {
	struct ibv_pd pd;
	shca_handle h;
};

struct shca_mr {
	struct ibv_mr mr;
	shca_handle h;
};

struct shca_channel {
	struct ibv_comp_channel ch;
	shca_handle h;
};

/*
 * A CQ is always an extended CQ (ibv_cq_ex starts like ibv_cq). For the
 * start_poll/next_poll interface it keeps the completion being read.
 */
struct shca_cq {
	struct ibv_cq_ex cq;
	shca_handle h;
	uint64_t wc_flags; /* what ibv_create_cq_ex asked for */
	struct ibv_wc cur;
	uint64_t cur_tag;
	uint32_t cur_priv;
};

struct shca_srq {
	struct ibv_srq srq;
	shca_handle h;
	uint32_t srq_num;
};

struct shca_ah {
	struct ibv_ah ah;
	shca_handle h;
};

/* The ibv_wr_* builder of a QP: requests built between wr_start and
 * wr_complete, posted as one list. */
#define SHCA_WR_BATCH 64
struct shca_wr_batch {
	int n;
	int err;
	struct ibv_send_wr wr[SHCA_WR_BATCH];
	struct ibv_sge sge[SHCA_WR_BATCH];
	struct ibv_sge *sgl[SHCA_WR_BATCH]; /* set_sge_list: the caller's list, copied */
};

struct shca_qp {
	struct ibv_qp_ex qpx; /* starts with struct ibv_qp */
	shca_handle h;
	int is_ex; /* created with send_ops_flags: ibv_qp_to_qp_ex answers */
	struct shca_wr_batch *batch;
};

#define shca_container(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

/* Offsets of union members the Go half reads in place. */
enum {
	shca_off_send_imm = offsetof(struct ibv_send_wr, imm_data),
	shca_off_rdma_raddr = offsetof(struct ibv_send_wr, wr.rdma.remote_addr),
	shca_off_rdma_rkey = offsetof(struct ibv_send_wr, wr.rdma.rkey),
	shca_off_atomic_raddr = offsetof(struct ibv_send_wr, wr.atomic.remote_addr),
	shca_off_atomic_compare = offsetof(struct ibv_send_wr, wr.atomic.compare_add),
	shca_off_atomic_swap = offsetof(struct ibv_send_wr, wr.atomic.swap),
	shca_off_atomic_rkey = offsetof(struct ibv_send_wr, wr.atomic.rkey),
	shca_off_ud_ah = offsetof(struct ibv_send_wr, wr.ud.ah),
	shca_off_ud_qpn = offsetof(struct ibv_send_wr, wr.ud.remote_qpn),
	shca_off_ud_qkey = offsetof(struct ibv_send_wr, wr.ud.remote_qkey),
	shca_off_wc_imm = offsetof(struct ibv_wc, imm_data),
	shca_off_ops_tm_unexp = offsetof(struct ibv_ops_wr, tm.unexpected_cnt),
	shca_off_ops_tm_handle = offsetof(struct ibv_ops_wr, tm.handle),
	shca_off_ops_tm_recv_wr_id = offsetof(struct ibv_ops_wr, tm.add.recv_wr_id),
	shca_off_ops_tm_sg_list = offsetof(struct ibv_ops_wr, tm.add.sg_list),
	shca_off_ops_tm_num_sge = offsetof(struct ibv_ops_wr, tm.add.num_sge),
	shca_off_ops_tm_tag = offsetof(struct ibv_ops_wr, tm.add.tag),
	shca_off_ops_tm_mask = offsetof(struct ibv_ops_wr, tm.add.mask),
};

/* The Go half's handle of an application's AH (UD sends). */
static inline shca_handle shca_ah_handle(struct ibv_ah *ah)
{
	return ah ? ((struct shca_ah *)ah)->h : 0;
}

#endif
