/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The C headers ferry's Rust code is bound to. bindgen reads this file with the
 * flags kbuild uses for C; rust/bindings.rs includes what it generates. Only the
 * items allowed by bindgen_parameters are emitted.
 */
#include <crypto/sha2.h>
#include <crypto/utils.h>
#include <linux/err.h>
#include <linux/errno.h>
#include <linux/mm.h>
#include <linux/random.h>
#include <linux/rcupdate.h>
#include <linux/vmalloc.h>
#include <linux/workqueue.h>
#include <net/genetlink.h>
#include <net/net_namespace.h>
#include <net/netlink.h>
#include <rdma/ib_cm.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>
#include <rdma/rw.h>

#include "../helpers/helpers.h"
#include "../../src/ferry/nl_gen.h"
#include "../../include/ferry/ferry.h"
