// SPDX-License-Identifier: GPL-2.0
/*
 * C shims for the static inline functions and macros ferry's Rust code needs.
 * See helpers.h.
 */
#include <crypto/sha2.h>
#include <linux/highmem.h>
#include <linux/mm.h>
#include <linux/netdevice.h>
#include <linux/workqueue.h>
#include <net/genetlink.h>
#include <net/net_namespace.h>
#include <net/netlink.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>

#include "helpers.h"

void ferry_helper_ib_dealloc_pd(struct ib_pd *pd)
{
	ib_dealloc_pd(pd);
}

u32 ferry_helper_rdma_start_port(const struct ib_device *device)
{
	return rdma_start_port(device);
}

u32 ferry_helper_rdma_end_port(const struct ib_device *device)
{
	return rdma_end_port(device);
}

void ferry_helper_ib_device_get(struct ib_device *device)
{
	get_device(&device->dev);
}

void ferry_helper_ib_device_put(struct ib_device *device)
{
	put_device(&device->dev);
}

bool ferry_helper_ib_device_try_get(struct ib_device *device)
{
	return ib_device_try_get(device);
}

/*
 * ib_device.name is a fixed array that ib_device_rename() rewrites in place:
 * copying it never touches freed memory, unlike dev_name() during a rename.
 */
void ferry_helper_ib_device_name(const struct ib_device *device, char *buf,
				 size_t len)
{
	strscpy(buf, device->name, len);
}

int ferry_helper_ib_port_netdev_name(struct ib_device *device, u32 port,
				     char *buf, size_t len)
{
	struct net_device *ndev = ib_device_get_netdev(device, port);

	if (!ndev)
		return -ENODEV;
	/* A fixed array rewritten in place on rename, as ib_core's nldev reads it. */
	strscpy(buf, ndev->name, len);
	dev_put(ndev);
	return 0;
}

/* @bad_wr (may be NULL) names the first request not posted on failure. */
int ferry_helper_ib_post_send(struct ib_qp *qp, const struct ib_send_wr *wr,
			      const struct ib_send_wr **bad_wr)
{
	return ib_post_send(qp, wr, bad_wr);
}

int ferry_helper_ib_post_recv(struct ib_qp *qp, const struct ib_recv_wr *wr)
{
	return ib_post_recv(qp, wr, NULL);
}

int ferry_helper_ib_destroy_qp(struct ib_qp *qp)
{
	return ib_destroy_qp(qp);
}

int ferry_helper_ib_dma_map_sg(struct ib_device *dev, struct scatterlist *sg,
			       int nents, int dir)
{
	return ib_dma_map_sg(dev, sg, nents, dir);
}

void ferry_helper_ib_dma_unmap_sg(struct ib_device *dev, struct scatterlist *sg,
				  int nents, int dir)
{
	ib_dma_unmap_sg(dev, sg, nents, dir);
}

void ferry_helper_ib_update_fast_reg_key(struct ib_mr *mr, u8 newkey)
{
	ib_update_fast_reg_key(mr, newkey);
}

int ferry_helper_ib_dereg_mr(struct ib_mr *mr)
{
	return ib_dereg_mr(mr);
}

struct scatterlist *ferry_helper_sg_next(struct scatterlist *sg)
{
	return sg_next(sg);
}

struct page *ferry_helper_sg_page(struct scatterlist *sg)
{
	return sg_page(sg);
}

void ferry_helper_sg_set_page(struct scatterlist *sg, struct page *page,
			      unsigned int len, unsigned int offset)
{
	sg_set_page(sg, page, len, offset);
}

u64 ferry_helper_sg_dma_address(struct scatterlist *sg)
{
	return sg_dma_address(sg);
}

unsigned int ferry_helper_sg_dma_len(struct scatterlist *sg)
{
	return sg_dma_len(sg);
}

u64 ferry_helper_ib_dma_map_single(struct ib_device *dev, void *cpu_addr,
				   size_t size, int direction)
{
	return ib_dma_map_single(dev, cpu_addr, size, direction);
}

void ferry_helper_ib_dma_unmap_single(struct ib_device *dev, u64 addr,
				      size_t size, int direction)
{
	ib_dma_unmap_single(dev, addr, size, direction);
}

void ferry_helper_flush_kernel_vmap_range(void *vaddr, int size)
{
	flush_kernel_vmap_range(vaddr, size);
}

void ferry_helper_invalidate_kernel_vmap_range(void *vaddr, int size)
{
	invalidate_kernel_vmap_range(vaddr, size);
}

u64 ferry_helper_ib_dma_map_page(struct ib_device *dev, struct page *page,
				 unsigned long offset, size_t size, int direction)
{
	return ib_dma_map_page(dev, page, offset, size, direction);
}

int ferry_helper_ib_dma_mapping_error(struct ib_device *dev, u64 dma_addr)
{
	return ib_dma_mapping_error(dev, dma_addr);
}

void ferry_helper_ib_dma_unmap_page(struct ib_device *dev, u64 addr,
				    size_t size, int direction)
{
	ib_dma_unmap_page(dev, addr, size, direction);
}

void ferry_helper_ib_dma_sync_single_for_cpu(struct ib_device *dev, u64 addr,
					     size_t size, int dir)
{
	ib_dma_sync_single_for_cpu(dev, addr, size, dir);
}

void ferry_helper_ib_dma_sync_single_for_device(struct ib_device *dev,
						u64 addr, size_t size, int dir)
{
	ib_dma_sync_single_for_device(dev, addr, size, dir);
}

/* Reclaim-safe: teardown work may run under memory pressure. */
void ferry_helper_hmac_sha256_update(struct hmac_sha256_ctx *ctx, const u8 *data,
				      size_t len)
{
	hmac_sha256_update(ctx, data, len);
}

const void *ferry_helper_cm_dst_addr(const struct rdma_cm_id *id)
{
	return &id->route.addr.dst_addr;
}

/*
 * A connection request's new id starts with its listener's handler and context;
 * its accepter moves it to its own. Called from the id's event handler, under
 * the handler mutex that rdma_cm holds while it reads both fields.
 */
void ferry_helper_cm_set_handler(struct rdma_cm_id *id,
				 rdma_cm_event_handler handler, void *context)
{
	id->event_handler = handler;
	id->context = context;
}

unsigned long ferry_helper_totalram_pages(void)
{
	return totalram_pages();
}
