//go:build libibverbs

/*
 * Symbols that exist for the loader, not for use:
 *
 * - the pre-1.1 ABI (IBVERBS_1.0 versions of names whose default is
 *   IBVERBS_1.1), for binaries linked against libibverbs before 2006:
 *   their structs differ from today's, so each fails cleanly (ENOSYS);
 * - the IBVERBS_PRIVATE_34 interface rdma-core's providers link against.
 *   Debian's perftest links libmlx5 and libefa directly, and those bind
 *   about 60 of these at load time: each exists so that the program
 *   starts, and fails cleanly if ever called (no provider owns a softhca
 *   device, so none is). Generated from objdump -T of Debian 12's
 *   libibverbs.so.1, libmlx5.so.1 and libefa.so.1.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

static int fail_int(void) { errno = ENOSYS; return ENOSYS; }
static int fail_minus1(void) { errno = ENOSYS; return -1; }
static void *fail_ptr(void) { errno = ENOSYS; return NULL; }
static void fail_void(void) { }
static unsigned long long fail_guid(void) { errno = ENOSYS; return 0; }

void shca_compat_ibv_ack_async_event(void) { fail_void(); }
__asm__(".symver shca_compat_ibv_ack_async_event, ibv_ack_async_event@IBVERBS_1.0");
void shca_compat_ibv_ack_cq_events(void) { fail_void(); }
__asm__(".symver shca_compat_ibv_ack_cq_events, ibv_ack_cq_events@IBVERBS_1.0");
void *shca_compat_ibv_alloc_pd(void) { return fail_ptr(); }
__asm__(".symver shca_compat_ibv_alloc_pd, ibv_alloc_pd@IBVERBS_1.0");
int shca_compat_ibv_attach_mcast(void) { return fail_int(); }
__asm__(".symver shca_compat_ibv_attach_mcast, ibv_attach_mcast@IBVERBS_1.0");
int shca_compat_ibv_close_device(void) { return fail_int(); }
__asm__(".symver shca_compat_ibv_close_device, ibv_close_device@IBVERBS_1.0");
void *shca_compat_ibv_create_ah(void) { return fail_ptr(); }
__asm__(".symver shca_compat_ibv_create_ah, ibv_create_ah@IBVERBS_1.0");
void *shca_compat_ibv_create_cq(void) { return fail_ptr(); }
__asm__(".symver shca_compat_ibv_create_cq, ibv_create_cq@IBVERBS_1.0");
void *shca_compat_ibv_create_qp(void) { return fail_ptr(); }
__asm__(".symver shca_compat_ibv_create_qp, ibv_create_qp@IBVERBS_1.0");
void *shca_compat_ibv_create_srq(void) { return fail_ptr(); }
__asm__(".symver shca_compat_ibv_create_srq, ibv_create_srq@IBVERBS_1.0");
int shca_compat_ibv_dealloc_pd(void) { return fail_int(); }
__asm__(".symver shca_compat_ibv_dealloc_pd, ibv_dealloc_pd@IBVERBS_1.0");
int shca_compat_ibv_dereg_mr(void) { return fail_int(); }
__asm__(".symver shca_compat_ibv_dereg_mr, ibv_dereg_mr@IBVERBS_1.0");
int shca_compat_ibv_destroy_ah(void) { return fail_int(); }
__asm__(".symver shca_compat_ibv_destroy_ah, ibv_destroy_ah@IBVERBS_1.0");
int shca_compat_ibv_destroy_cq(void) { return fail_int(); }
__asm__(".symver shca_compat_ibv_destroy_cq, ibv_destroy_cq@IBVERBS_1.0");
int shca_compat_ibv_destroy_qp(void) { return fail_int(); }
__asm__(".symver shca_compat_ibv_destroy_qp, ibv_destroy_qp@IBVERBS_1.0");
int shca_compat_ibv_destroy_srq(void) { return fail_int(); }
__asm__(".symver shca_compat_ibv_destroy_srq, ibv_destroy_srq@IBVERBS_1.0");
int shca_compat_ibv_detach_mcast(void) { return fail_int(); }
__asm__(".symver shca_compat_ibv_detach_mcast, ibv_detach_mcast@IBVERBS_1.0");
void shca_compat_ibv_free_device_list(void) { fail_void(); }
__asm__(".symver shca_compat_ibv_free_device_list, ibv_free_device_list@IBVERBS_1.0");
int shca_compat_ibv_get_async_event(void) { return fail_minus1(); }
__asm__(".symver shca_compat_ibv_get_async_event, ibv_get_async_event@IBVERBS_1.0");
int shca_compat_ibv_get_cq_event(void) { return fail_minus1(); }
__asm__(".symver shca_compat_ibv_get_cq_event, ibv_get_cq_event@IBVERBS_1.0");
unsigned long long shca_compat_ibv_get_device_guid(void) { return fail_guid(); }
__asm__(".symver shca_compat_ibv_get_device_guid, ibv_get_device_guid@IBVERBS_1.0");
void *shca_compat_ibv_get_device_list(void) { return fail_ptr(); }
__asm__(".symver shca_compat_ibv_get_device_list, ibv_get_device_list@IBVERBS_1.0");
void *shca_compat_ibv_get_device_name(void) { return fail_ptr(); }
__asm__(".symver shca_compat_ibv_get_device_name, ibv_get_device_name@IBVERBS_1.0");
int shca_compat_ibv_modify_qp(void) { return fail_int(); }
__asm__(".symver shca_compat_ibv_modify_qp, ibv_modify_qp@IBVERBS_1.0");
int shca_compat_ibv_modify_srq(void) { return fail_int(); }
__asm__(".symver shca_compat_ibv_modify_srq, ibv_modify_srq@IBVERBS_1.0");
void *shca_compat_ibv_open_device(void) { return fail_ptr(); }
__asm__(".symver shca_compat_ibv_open_device, ibv_open_device@IBVERBS_1.0");
int shca_compat_ibv_query_device(void) { return fail_int(); }
__asm__(".symver shca_compat_ibv_query_device, ibv_query_device@IBVERBS_1.0");
int shca_compat_ibv_query_gid(void) { return fail_int(); }
__asm__(".symver shca_compat_ibv_query_gid, ibv_query_gid@IBVERBS_1.0");
int shca_compat_ibv_query_pkey(void) { return fail_int(); }
__asm__(".symver shca_compat_ibv_query_pkey, ibv_query_pkey@IBVERBS_1.0");
int shca_compat_ibv_query_port(void) { return fail_int(); }
__asm__(".symver shca_compat_ibv_query_port, ibv_query_port@IBVERBS_1.0");
int shca_compat_ibv_query_qp(void) { return fail_int(); }
__asm__(".symver shca_compat_ibv_query_qp, ibv_query_qp@IBVERBS_1.0");
int shca_compat_ibv_query_srq(void) { return fail_int(); }
__asm__(".symver shca_compat_ibv_query_srq, ibv_query_srq@IBVERBS_1.0");
void *shca_compat_ibv_reg_mr(void) { return fail_ptr(); }
__asm__(".symver shca_compat_ibv_reg_mr, ibv_reg_mr@IBVERBS_1.0");
int shca_compat_ibv_resize_cq(void) { return fail_int(); }
__asm__(".symver shca_compat_ibv_resize_cq, ibv_resize_cq@IBVERBS_1.0");

/* IBVERBS_PRIVATE_34 (ibv_query_gid_type is real: shim.c) */
void __verbs_log(void) { fail_void(); }
void *_verbs_init_and_alloc_context(void) { return fail_ptr(); }
int execute_ioctl(void) { return fail_int(); }
int ibv_cmd_advise_mr(void) { return fail_int(); }
int ibv_cmd_alloc_dm(void) { return fail_int(); }
int ibv_cmd_alloc_mw(void) { return fail_int(); }
int ibv_cmd_alloc_pd(void) { return fail_int(); }
int ibv_cmd_attach_mcast(void) { return fail_int(); }
int ibv_cmd_close_xrcd(void) { return fail_int(); }
int ibv_cmd_create_ah(void) { return fail_int(); }
int ibv_cmd_create_counters(void) { return fail_int(); }
int ibv_cmd_create_cq_ex(void) { return fail_int(); }
int ibv_cmd_create_flow(void) { return fail_int(); }
int ibv_cmd_create_flow_action_esp(void) { return fail_int(); }
int ibv_cmd_create_qp_ex(void) { return fail_int(); }
int ibv_cmd_create_qp_ex2(void) { return fail_int(); }
int ibv_cmd_create_rwq_ind_table(void) { return fail_int(); }
int ibv_cmd_create_srq(void) { return fail_int(); }
int ibv_cmd_create_srq_ex(void) { return fail_int(); }
int ibv_cmd_create_wq(void) { return fail_int(); }
int ibv_cmd_dealloc_mw(void) { return fail_int(); }
int ibv_cmd_dealloc_pd(void) { return fail_int(); }
int ibv_cmd_dereg_mr(void) { return fail_int(); }
int ibv_cmd_destroy_ah(void) { return fail_int(); }
int ibv_cmd_destroy_counters(void) { return fail_int(); }
int ibv_cmd_destroy_cq(void) { return fail_int(); }
int ibv_cmd_destroy_flow(void) { return fail_int(); }
int ibv_cmd_destroy_flow_action(void) { return fail_int(); }
int ibv_cmd_destroy_qp(void) { return fail_int(); }
int ibv_cmd_destroy_rwq_ind_table(void) { return fail_int(); }
int ibv_cmd_destroy_srq(void) { return fail_int(); }
int ibv_cmd_destroy_wq(void) { return fail_int(); }
int ibv_cmd_detach_mcast(void) { return fail_int(); }
int ibv_cmd_free_dm(void) { return fail_int(); }
int ibv_cmd_get_context(void) { return fail_int(); }
int ibv_cmd_modify_cq(void) { return fail_int(); }
int ibv_cmd_modify_flow_action_esp(void) { return fail_int(); }
int ibv_cmd_modify_qp(void) { return fail_int(); }
int ibv_cmd_modify_qp_ex(void) { return fail_int(); }
int ibv_cmd_modify_srq(void) { return fail_int(); }
int ibv_cmd_modify_wq(void) { return fail_int(); }
int ibv_cmd_open_qp(void) { return fail_int(); }
int ibv_cmd_open_xrcd(void) { return fail_int(); }
int ibv_cmd_query_context(void) { return fail_int(); }
int ibv_cmd_query_device_any(void) { return fail_int(); }
int ibv_cmd_query_mr(void) { return fail_int(); }
int ibv_cmd_query_port(void) { return fail_int(); }
int ibv_cmd_query_qp(void) { return fail_int(); }
int ibv_cmd_query_srq(void) { return fail_int(); }
int ibv_cmd_read_counters(void) { return fail_int(); }
int ibv_cmd_reg_dm_mr(void) { return fail_int(); }
int ibv_cmd_reg_dmabuf_mr(void) { return fail_int(); }
int ibv_cmd_reg_mr(void) { return fail_int(); }
int ibv_cmd_rereg_mr(void) { return fail_int(); }
int ibv_cmd_resize_cq(void) { return fail_int(); }
void verbs_init_cq(void) { fail_void(); }
void *verbs_open_device(void) { return fail_ptr(); }
void verbs_register_driver_34(void) { fail_void(); }
void verbs_set_ops(void) { fail_void(); }
void verbs_uninit_context(void) { fail_void(); }
bool verbs_allow_disassociate_destroy;
