// SPDX-License-Identifier: GPL-2.0
/* See blk_helpers.h. */

#include <linux/bio.h>
#include <linux/capability.h>
#include <linux/module.h>
#include <linux/fs.h>
#include <linux/scatterlist.h>

#include "blk_helpers.h"

void *ferry_blk_rq_to_pdu(struct request *rq)
{
	return blk_mq_rq_to_pdu(rq);
}

struct request *ferry_blk_rq_from_pdu(void *pdu)
{
	return blk_mq_rq_from_pdu(pdu);
}

unsigned int ferry_blk_rq_tag(const struct request *rq)
{
	return rq->tag;
}

sector_t ferry_blk_rq_pos(const struct request *rq)
{
	return blk_rq_pos(rq);
}

unsigned int ferry_blk_rq_bytes(const struct request *rq)
{
	return blk_rq_bytes(rq);
}

enum req_op ferry_blk_req_op(const struct request *rq)
{
	return req_op(rq);
}

blk_opf_t ferry_blk_rq_flags(const struct request *rq)
{
	return rq->cmd_flags & ~REQ_OP_MASK;
}

bool ferry_blk_rq_first_dispatch(struct request *rq)
{
	/* As nvme_setup_cmd(): the flag lives until the request is freed. */
	if (rq->rq_flags & RQF_DONTPREP)
		return false;
	rq->rq_flags |= RQF_DONTPREP;
	return true;
}

unsigned short ferry_blk_rq_nr_phys_segments(struct request *rq)
{
	return blk_rq_nr_phys_segments(rq);
}

int ferry_blk_rq_map_sg(struct request *rq, struct scatterlist *sglist)
{
	return blk_rq_map_sg(rq, sglist);
}

unsigned int ferry_blk_hctx_index(const struct blk_mq_hw_ctx *hctx)
{
	return hctx->queue_num;
}

void *ferry_blk_hctx_queuedata(const struct blk_mq_hw_ctx *hctx)
{
	return hctx->queue->queuedata;
}

void *ferry_blk_rq_queuedata(const struct request *rq)
{
	return rq->q->queuedata;
}

unsigned int ferry_blk_rq_hctx_index(const struct request *rq)
{
	return rq->mq_hctx->queue_num;
}

void ferry_blk_run_hw_queue(struct request_queue *q, unsigned int index, bool async)
{
	/* (ferry_blk never changes a disk's number of hardware queues.) */
	if (index < q->nr_hw_queues)
		blk_mq_run_hw_queue(queue_hctx(q, index), async);
}

void ferry_blk_freeze_queue(struct request_queue *q)
{
	blk_mq_freeze_queue_nomemsave(q);
}

void ferry_blk_unfreeze_queue(struct request_queue *q)
{
	blk_mq_unfreeze_queue_nomemrestore(q);
}

struct request_queue *ferry_blk_disk_queue(struct gendisk *disk)
{
	return disk->queue;
}

/* The disks of the module this file is linked into: an open disk holds it. */
static const struct block_device_operations ferry_blk_fops = {
	.owner = THIS_MODULE,
};

struct gendisk *ferry_blk_alloc_disk(struct blk_mq_tag_set *set,
				     struct queue_limits *lim, void *queuedata)
{
	return blk_mq_alloc_disk(set, lim, queuedata);
}

void ferry_blk_disk_setup(struct gendisk *disk, const char *name)
{
	disk->fops = &ferry_blk_fops;
	strscpy(disk->disk_name, name, DISK_NAME_LEN);
}

/*
 * The identity a disk shows in sysfs, as an NVMe namespace does: wwid
 * ("uuid." and the UUID, what udev's by-id links are made from) and uuid.
 * Only for a disk whose private_data points at its 16-byte UUID.
 */
static ssize_t wwid_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "uuid.%pU\n", dev_to_disk(dev)->private_data);
}
static DEVICE_ATTR_RO(wwid);

static ssize_t uuid_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%pU\n", dev_to_disk(dev)->private_data);
}
static DEVICE_ATTR_RO(uuid);

static struct attribute *ferry_blk_id_attrs[] = {
	&dev_attr_wwid.attr,
	&dev_attr_uuid.attr,
	NULL,
};

static const struct attribute_group ferry_blk_id_group = {
	.attrs = ferry_blk_id_attrs,
};

static const struct attribute_group *ferry_blk_id_groups[] = {
	&ferry_blk_id_group,
	NULL,
};

int ferry_blk_disk_add(struct gendisk *disk, const u8 *id)
{
	disk->private_data = (void *)id;
	return device_add_disk(NULL, disk, id ? ferry_blk_id_groups : NULL);
}

sector_t ferry_blk_disk_capacity(struct gendisk *disk)
{
	return get_capacity(disk);
}

unsigned int ferry_blk_disk_openers(struct gendisk *disk)
{
	return disk_openers(disk);
}

const char *ferry_blk_disk_name(struct gendisk *disk)
{
	return disk->disk_name;
}

/* Opens @path, exclusively for @holder: a disk in use elsewhere is -EBUSY. */
struct block_device *ferry_blk_bdev_open(const char *path, bool write,
					 void *holder, struct file **file)
{
	blk_mode_t mode = BLK_OPEN_READ | (write ? BLK_OPEN_WRITE : 0);
	struct file *f = bdev_file_open_by_path(path, mode, holder, NULL);

	if (IS_ERR(f))
		return ERR_CAST(f);
	*file = f;
	return file_bdev(f);
}

#if IS_ENABLED(CONFIG_FERRY_KUNIT_TEST)
struct block_device *ferry_blk_bdev_open_dev(unsigned int major, unsigned int minor,
					     bool write, void *holder, struct file **file)
{
	blk_mode_t mode = BLK_OPEN_READ | (write ? BLK_OPEN_WRITE : 0);
	struct file *f = bdev_file_open_by_dev(MKDEV(major, minor), mode, holder, NULL);

	if (IS_ERR(f))
		return ERR_CAST(f);
	*file = f;
	return file_bdev(f);
}
#endif

sector_t ferry_blk_bdev_nr_sectors(struct block_device *bdev)
{
	return bdev_nr_sectors(bdev);
}

unsigned int ferry_blk_bdev_logical_block_size(struct block_device *bdev)
{
	return bdev_logical_block_size(bdev);
}

unsigned int ferry_blk_bdev_physical_block_size(struct block_device *bdev)
{
	return bdev_physical_block_size(bdev);
}

unsigned int ferry_blk_bdev_max_discard_sectors(struct block_device *bdev)
{
	return bdev_max_discard_sectors(bdev);
}

unsigned int ferry_blk_bdev_discard_granularity(struct block_device *bdev)
{
	return bdev_discard_granularity(bdev);
}

unsigned int ferry_blk_bdev_write_zeroes_sectors(struct block_device *bdev)
{
	return bdev_write_zeroes_sectors(bdev);
}

unsigned int ferry_blk_bdev_max_hw_sectors(struct block_device *bdev)
{
	return queue_max_hw_sectors(bdev_get_queue(bdev));
}

bool ferry_blk_bdev_write_cache(struct block_device *bdev)
{
	return bdev_write_cache(bdev);
}

bool ferry_blk_bdev_fua(struct block_device *bdev)
{
	return bdev_fua(bdev);
}

bool ferry_blk_bdev_rotational(struct block_device *bdev)
{
	return bdev_rot(bdev);
}

bool ferry_blk_bdev_nowait(struct block_device *bdev)
{
	struct request_queue *q = bdev_get_queue(bdev);

	/*
	 * A driver that may block in ->queue_rq is called in the submitter's
	 * context whatever REQ_NOWAIT says (nbd, nvme-tcp, some SCSI hosts).
	 */
	if (queue_is_mq(q) && (q->tag_set->flags & BLK_MQ_F_BLOCKING))
		return false;
	return bdev_nowait(bdev);
}

bool ferry_blk_bdev_fits_one_bio(struct block_device *bdev, sector_t sector,
				 unsigned int sectors, unsigned int segments)
{
	const struct queue_limits *lim = bdev_limits(bdev);
	unsigned int most = lim->max_sectors;

	if (lim->chunk_sectors)
		most = min(most, blk_boundary_sectors_left(sector, lim->chunk_sectors));
	return segments <= BIO_MAX_VECS && segments <= lim->max_segments &&
	       sectors <= most;
}

bool ferry_blk_bdev_read_only(struct block_device *bdev)
{
	return bdev_read_only(bdev);
}

int ferry_blk_bdev_unique_id(struct block_device *bdev, u8 id[16])
{
	static const enum blk_unique_id types[] = { BLK_UID_NAA, BLK_UID_EUI64, BLK_UID_T10 };
	struct gendisk *disk = bdev->bd_disk;
	int i, len;

	/*
	 * A partition is not its disk: it has no ID of its own. Nor has a
	 * device-mapper device (always "dm-N"): dm passes the ID of the one
	 * device under a single-target table on, which every linear volume
	 * of that device would share.
	 */
	if (bdev_is_partition(bdev) || !disk->fops->get_unique_id ||
	    !strncmp(disk->disk_name, "dm-", 3))
		return -EOPNOTSUPP;
	for (i = 0; i < ARRAY_SIZE(types); i++) {
		memset(id, 0, 16);
		len = disk->fops->get_unique_id(disk, id, types[i]);
		if (len > 0)
			return min(len, 16);
	}
	return -EOPNOTSUPP;
}

struct bio *ferry_blk_bio_alloc(struct block_device *bdev, unsigned short nr_vecs,
				blk_opf_t opf, sector_t sector)
{
	struct bio *bio = bio_alloc(bdev, nr_vecs, opf, GFP_NOIO);

	bio->bi_iter.bi_sector = sector;
	return bio;
}

void ferry_blk_bio_set_sector(struct bio *bio, sector_t sector)
{
	bio->bi_iter.bi_sector = sector;
}

void ferry_blk_bio_set_end_io(struct bio *bio, bio_end_io_t *end_io, void *private)
{
	bio->bi_end_io = end_io;
	bio->bi_private = private;
}

void *ferry_blk_bio_private(struct bio *bio)
{
	return bio->bi_private;
}

int ferry_blk_bio_errno(struct bio *bio)
{
	return blk_status_to_errno(bio->bi_status);
}

struct page *ferry_blk_sg_page(struct scatterlist *sg)
{
	return sg_page(sg);
}

struct scatterlist *ferry_blk_sg_next(struct scatterlist *sg)
{
	return sg_next(sg);
}

bool ferry_blk_capable_sys_admin(void)
{
	return capable(CAP_SYS_ADMIN);
}

/* THIS_MODULE: the module this file is linked into. */
bool ferry_blk_module_get(void)
{
	return try_module_get(THIS_MODULE);
}

void ferry_blk_module_put(void)
{
	module_put(THIS_MODULE);
}
