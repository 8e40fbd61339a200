/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The C headers ferry_blk's rust/ code (the block layer, netlink, work) is
 * bound to.
 * bindgen reads this file with blk_parameters; rust/blk_bindings.rs includes
 * what it generates. Only the items blk_parameters allows are emitted.
 */
#include <linux/bio.h>
#include <linux/blk-mq.h>
#include <linux/blkdev.h>
#include <linux/fs.h>
#include <linux/scatterlist.h>
#include <net/genetlink.h>
#include <net/net_namespace.h>
#include <net/netlink.h>

#include "../helpers/blk_helpers.h"
#include "../helpers/genl_helpers.h"
#include "../helpers/work_helpers.h"
#include "../../src/ferry_blk/nl_gen.h"

/* Flag values bindgen cannot evaluate as macros (they are casts). */
const blk_features_t FERRY_BLK_FEAT_WRITE_CACHE = BLK_FEAT_WRITE_CACHE;
const blk_features_t FERRY_BLK_FEAT_FUA = BLK_FEAT_FUA;
const blk_features_t FERRY_BLK_FEAT_ROTATIONAL = BLK_FEAT_ROTATIONAL;
const blk_opf_t FERRY_BLK_REQ_FUA = REQ_FUA;
const blk_opf_t FERRY_BLK_OP_READ = REQ_OP_READ;
const blk_opf_t FERRY_BLK_OP_WRITE = REQ_OP_WRITE;
const gfp_t FERRY_BLK_GFP_NOIO = GFP_NOIO;
const gfp_t FERRY_BLK_GFP_KERNEL = GFP_KERNEL;
const blk_opf_t FERRY_BLK_REQ_PREFLUSH = REQ_PREFLUSH;
const blk_opf_t FERRY_BLK_REQ_SYNC = REQ_SYNC;
const blk_opf_t FERRY_BLK_REQ_IDLE = REQ_IDLE;
const blk_opf_t FERRY_BLK_REQ_NOWAIT = REQ_NOWAIT;
const blk_opf_t FERRY_BLK_REQ_NOUNMAP = REQ_NOUNMAP;
const blk_status_t FERRY_BLK_STS_OK = BLK_STS_OK;
const blk_status_t FERRY_BLK_STS_RESOURCE = BLK_STS_RESOURCE;
const blk_status_t FERRY_BLK_STS_DEV_RESOURCE = BLK_STS_DEV_RESOURCE;
const blk_status_t FERRY_BLK_STS_IOERR = BLK_STS_IOERR;
