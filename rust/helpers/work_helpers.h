/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C shims for rust/work.rs (a module's own work queue, the CPU count, the
 * tick count), linked into each module that uses it: ferry and ferry_blk.
 * Each does exactly what the function or macro it is named after does.
 */
#ifndef FERRY_WORK_HELPERS_H
#define FERRY_WORK_HELPERS_H

#include <linux/types.h>

struct workqueue_struct;

struct workqueue_struct *ferry_helper_alloc_workqueue(const char *name);
unsigned int ferry_helper_num_online_cpus(void);
u64 ferry_helper_get_jiffies_64(void);

#endif
