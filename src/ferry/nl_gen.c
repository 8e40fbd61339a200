// SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR BSD-3-Clause)
/* Do not edit directly, auto-generated from: */
/*	Documentation/netlink/specs/ferry.yaml */
/* YNL-GEN kernel source */
/* To regenerate run: tools/net/ynl/ynl-regen.sh */

#include <net/netlink.h>
#include <net/genetlink.h>

#include "nl_gen.h"

#include <uapi/linux/ferry.h>

/* FERRY_CMD_DEVICE_GET - do */
static const struct nla_policy ferry_device_get_nl_policy[FERRY_A_DEVICE_NAME + 1] = {
	[FERRY_A_DEVICE_INDEX] = { .type = NLA_U32, },
	[FERRY_A_DEVICE_NAME] = { .type = NLA_NUL_STRING, .len = FERRY_DEV_NAME_LEN, },
};

/* Ops table for ferry */
static const struct genl_split_ops ferry_nl_ops[] = {
	{
		.cmd		= FERRY_CMD_DEVICE_GET,
		.doit		= ferry_nl_device_get_doit,
		.policy		= ferry_device_get_nl_policy,
		.maxattr	= FERRY_A_DEVICE_NAME,
		.flags		= GENL_CMD_CAP_DO,
	},
	{
		.cmd	= FERRY_CMD_DEVICE_GET,
		.dumpit	= ferry_nl_device_get_dumpit,
		.flags	= GENL_CMD_CAP_DUMP,
	},
};

struct genl_family ferry_nl_family __ro_after_init = {
	.name		= FERRY_FAMILY_NAME,
	.version	= FERRY_FAMILY_VERSION,
	.netnsok	= true,
	.parallel_ops	= true,
	.module		= THIS_MODULE,
	.split_ops	= ferry_nl_ops,
	.n_split_ops	= ARRAY_SIZE(ferry_nl_ops),
};
