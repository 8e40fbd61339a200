/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C shims for the static inline functions and macros of ib_verbs.h, rdma_cm.h,
 * genetlink.h, netlink.h, net_namespace.h, workqueue.h, mm.h, highmem.h and crypto/sha2.h that ferry's Rust
 * code calls: bindgen cannot see through those.
 * Each does exactly what the function or macro it is named after does.
 */
#ifndef FERRY_RUST_HELPERS_H
#define FERRY_RUST_HELPERS_H

#include <linux/types.h>
#include <rdma/rdma_cm.h>

#include "genl_helpers.h"
#include "work_helpers.h"

struct genl_family;
struct hmac_sha256_ctx;
struct genl_info;
struct ib_client;
struct ib_cq;
struct ib_qp;
struct ib_mr;
struct scatterlist;
struct page;
struct ib_recv_wr;
struct ib_send_wr;
struct workqueue_struct;
struct ib_device;
struct ib_pd;
struct net;
struct netlink_callback;
struct netlink_ext_ack;
struct nlattr;
struct sk_buff;

/* rdma/ib_verbs.h */
void ferry_helper_ib_dealloc_pd(struct ib_pd *pd);
u32 ferry_helper_rdma_start_port(const struct ib_device *device);
u32 ferry_helper_rdma_end_port(const struct ib_device *device);
void ferry_helper_ib_device_get(struct ib_device *device);
void ferry_helper_ib_device_put(struct ib_device *device);
bool ferry_helper_ib_device_try_get(struct ib_device *device);
void ferry_helper_ib_device_name(const struct ib_device *device, char *buf,
				 size_t len);
int ferry_helper_ib_port_netdev_name(struct ib_device *device, u32 port,
				     char *buf, size_t len);

unsigned long ferry_helper_totalram_pages(void);
int ferry_helper_ib_post_send(struct ib_qp *qp, const struct ib_send_wr *wr,
			      const struct ib_send_wr **bad_wr);
int ferry_helper_ib_post_recv(struct ib_qp *qp, const struct ib_recv_wr *wr);
int ferry_helper_ib_destroy_qp(struct ib_qp *qp);
u64 ferry_helper_ib_dma_map_single(struct ib_device *dev, void *cpu_addr,
				   size_t size, int direction);
void ferry_helper_ib_dma_unmap_single(struct ib_device *dev, u64 addr,
				      size_t size, int direction);
void ferry_helper_flush_kernel_vmap_range(void *vaddr, int size);
void ferry_helper_invalidate_kernel_vmap_range(void *vaddr, int size);
u64 ferry_helper_ib_dma_map_page(struct ib_device *dev, struct page *page,
				 unsigned long offset, size_t size, int direction);
int ferry_helper_ib_dma_mapping_error(struct ib_device *dev, u64 dma_addr);
void ferry_helper_ib_dma_unmap_page(struct ib_device *dev, u64 addr,
				    size_t size, int direction);
void ferry_helper_ib_dma_sync_single_for_cpu(struct ib_device *dev, u64 addr,
					     size_t size, int dir);
void ferry_helper_ib_dma_sync_single_for_device(struct ib_device *dev,
						u64 addr, size_t size, int dir);

int ferry_helper_ib_dma_map_sg(struct ib_device *dev, struct scatterlist *sg,
			       int nents, int dir);
void ferry_helper_ib_dma_unmap_sg(struct ib_device *dev, struct scatterlist *sg,
				  int nents, int dir);
void ferry_helper_ib_update_fast_reg_key(struct ib_mr *mr, u8 newkey);
int ferry_helper_ib_dereg_mr(struct ib_mr *mr);

/* linux/scatterlist.h */
struct scatterlist *ferry_helper_sg_next(struct scatterlist *sg);
struct page *ferry_helper_sg_page(struct scatterlist *sg);
void ferry_helper_sg_set_page(struct scatterlist *sg, struct page *page,
			      unsigned int len, unsigned int offset);
u64 ferry_helper_sg_dma_address(struct scatterlist *sg);
unsigned int ferry_helper_sg_dma_len(struct scatterlist *sg);

/* crypto/sha2.h */
void ferry_helper_hmac_sha256_update(struct hmac_sha256_ctx *ctx, const u8 *data,
				      size_t len);

/* rdma/rdma_cm.h */
const void *ferry_helper_cm_dst_addr(const struct rdma_cm_id *id);
void ferry_helper_cm_set_handler(struct rdma_cm_id *id,
				 rdma_cm_event_handler handler, void *context);

#endif /* FERRY_RUST_HELPERS_H */
