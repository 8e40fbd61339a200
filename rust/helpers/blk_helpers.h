/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C shims for the static inline functions and macros of blk-mq.h, blkdev.h
 * that rust/block calls: bindgen cannot see through those. Each does exactly
 * what the function or macro it is named after does.
 */
#ifndef FERRY_BLK_HELPERS_H
#define FERRY_BLK_HELPERS_H

#include <linux/blk-mq.h>
#include <linux/blkdev.h>

void *ferry_blk_rq_to_pdu(struct request *rq);
struct request *ferry_blk_rq_from_pdu(void *pdu);
unsigned int ferry_blk_rq_tag(const struct request *rq);
sector_t ferry_blk_rq_pos(const struct request *rq);
unsigned int ferry_blk_rq_bytes(const struct request *rq);
enum req_op ferry_blk_req_op(const struct request *rq);
blk_opf_t ferry_blk_rq_flags(const struct request *rq);
/* Whether this is the request's first dispatch (marks it RQF_DONTPREP). */
bool ferry_blk_rq_first_dispatch(struct request *rq);
unsigned short ferry_blk_rq_nr_phys_segments(struct request *rq);
int ferry_blk_rq_map_sg(struct request *rq, struct scatterlist *sglist);
unsigned int ferry_blk_hctx_index(const struct blk_mq_hw_ctx *hctx);
void *ferry_blk_hctx_queuedata(const struct blk_mq_hw_ctx *hctx);
void *ferry_blk_rq_queuedata(const struct request *rq);
unsigned int ferry_blk_rq_hctx_index(const struct request *rq);
/* Runs hardware queue @index of @q (none if it has no such queue). */
void ferry_blk_run_hw_queue(struct request_queue *q, unsigned int index, bool async);
void ferry_blk_freeze_queue(struct request_queue *q);
void ferry_blk_unfreeze_queue(struct request_queue *q);
struct request_queue *ferry_blk_disk_queue(struct gendisk *disk);
struct gendisk *ferry_blk_alloc_disk(struct blk_mq_tag_set *set,
				     struct queue_limits *lim, void *queuedata);
void ferry_blk_disk_setup(struct gendisk *disk, const char *name);
/*
 * Adds @disk (no parent device); with @id, a 16-byte UUID that lives as long
 * as the disk, it shows it in sysfs as "wwid" (uuid.UUID) and "uuid".
 */
int ferry_blk_disk_add(struct gendisk *disk, const u8 *id);
sector_t ferry_blk_disk_capacity(struct gendisk *disk);
unsigned int ferry_blk_disk_openers(struct gendisk *disk);
const char *ferry_blk_disk_name(struct gendisk *disk);


struct block_device *ferry_blk_bdev_open(const char *path, bool write,
					 void *holder, struct file **file);
/* As ferry_blk_bdev_open(), by device number (no path lookup): test builds. */
struct block_device *ferry_blk_bdev_open_dev(unsigned int major, unsigned int minor,
					     bool write, void *holder, struct file **file);
sector_t ferry_blk_bdev_nr_sectors(struct block_device *bdev);
unsigned int ferry_blk_bdev_logical_block_size(struct block_device *bdev);
unsigned int ferry_blk_bdev_physical_block_size(struct block_device *bdev);
unsigned int ferry_blk_bdev_max_discard_sectors(struct block_device *bdev);
unsigned int ferry_blk_bdev_discard_granularity(struct block_device *bdev);
unsigned int ferry_blk_bdev_write_zeroes_sectors(struct block_device *bdev);
unsigned int ferry_blk_bdev_max_hw_sectors(struct block_device *bdev);
bool ferry_blk_bdev_write_cache(struct block_device *bdev);
bool ferry_blk_bdev_fua(struct block_device *bdev);
bool ferry_blk_bdev_rotational(struct block_device *bdev);
bool ferry_blk_bdev_read_only(struct block_device *bdev);
/*
 * Whether the device takes REQ_NOWAIT bios (ending them BLK_STS_AGAIN where
 * they would wait), and its driver does not block in ->queue_rq.
 */
bool ferry_blk_bdev_nowait(struct block_device *bdev);
/*
 * Whether @sectors at @sector in at most @segments page-sized segments fit one
 * bio the block layer does not split for @bdev's limits (it fails a REQ_NOWAIT
 * bio it would split with BLK_STS_AGAIN). An upper bound of segments: pages
 * the block layer merges count for less.
 */
bool ferry_blk_bdev_fits_one_bio(struct block_device *bdev, sector_t sector,
				 unsigned int sectors, unsigned int segments);
/*
 * The device's own unique ID (NAA, else EUI-64, else T10, as
 * ->get_unique_id() gives it) in @id, zero-padded: its length, or
 * -EOPNOTSUPP when it has none (a partition, or a device-mapper device,
 * has none of its own).
 */
int ferry_blk_bdev_unique_id(struct block_device *bdev, u8 id[16]);

struct bio *ferry_blk_bio_alloc(struct block_device *bdev, unsigned short nr_vecs,
				blk_opf_t opf, sector_t sector);
void ferry_blk_bio_set_sector(struct bio *bio, sector_t sector);
/* Sets what a bio calls when it ends, and the pointer it passes. */
void ferry_blk_bio_set_end_io(struct bio *bio, bio_end_io_t *end_io, void *private);
void *ferry_blk_bio_private(struct bio *bio);
/* The bio's status as an errno (0 once it ended well). */
int ferry_blk_bio_errno(struct bio *bio);
struct page *ferry_blk_sg_page(struct scatterlist *sg);
struct scatterlist *ferry_blk_sg_next(struct scatterlist *sg);

bool ferry_blk_capable_sys_admin(void);
bool ferry_blk_module_get(void);
void ferry_blk_module_put(void);

#endif
