// SPDX-License-Identifier: GPL-2.0
/* See work_helpers.h. */

#include <linux/cpumask.h>
#include <linux/jiffies.h>
#include <linux/workqueue.h>

#include "work_helpers.h"

/* Unbound, and able to make progress under memory pressure (reclaim). */
struct workqueue_struct *ferry_helper_alloc_workqueue(const char *name)
{
	return alloc_workqueue("%s", WQ_UNBOUND | WQ_MEM_RECLAIM, 0, name);
}

unsigned int ferry_helper_num_online_cpus(void)
{
	return num_online_cpus();
}

u64 ferry_helper_get_jiffies_64(void)
{
	return get_jiffies_64();
}
