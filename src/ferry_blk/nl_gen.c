// SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR BSD-3-Clause)
/* Do not edit directly, auto-generated from: */
/*	Documentation/netlink/specs/ferry-blk.yaml */
/* YNL-GEN kernel source */
/* To regenerate run: tools/net/ynl/ynl-regen.sh */

#include <net/netlink.h>
#include <net/genetlink.h>

#include "nl_gen.h"

#include <uapi/linux/ferry_blk.h>

/* Integer value ranges */
static const struct netlink_range_validation ferry_blk_a_map_fast_fail_range = {
	.max	= FERRY_BLK_MAX_TIMEOUT,
};

static const struct netlink_range_validation ferry_blk_a_map_give_up_range = {
	.min	= 1ULL,
	.max	= FERRY_BLK_MAX_TIMEOUT,
};

/* FERRY_BLK_CMD_EXPORT_ADD - do */
static const struct nla_policy ferry_blk_export_add_nl_policy[FERRY_BLK_A_EXPORT_UUID + 1] = {
	[FERRY_BLK_A_EXPORT_NAME] = { .type = NLA_NUL_STRING, .len = FERRY_BLK_EXPORT_NAME_LEN, },
	[FERRY_BLK_A_EXPORT_PATH] = { .type = NLA_NUL_STRING, .len = FERRY_BLK_PATH_LEN, },
	[FERRY_BLK_A_EXPORT_READ_ONLY] = { .type = NLA_FLAG, },
	[FERRY_BLK_A_EXPORT_SHARED] = { .type = NLA_FLAG, },
	[FERRY_BLK_A_EXPORT_UUID] = NLA_POLICY_EXACT_LEN(16),
};

/* FERRY_BLK_CMD_EXPORT_DEL - do */
static const struct nla_policy ferry_blk_export_del_nl_policy[FERRY_BLK_A_EXPORT_FORCE + 1] = {
	[FERRY_BLK_A_EXPORT_NAME] = { .type = NLA_NUL_STRING, .len = FERRY_BLK_EXPORT_NAME_LEN, },
	[FERRY_BLK_A_EXPORT_FORCE] = { .type = NLA_FLAG, },
};

/* FERRY_BLK_CMD_EXPORT_RESIZE - do */
static const struct nla_policy ferry_blk_export_resize_nl_policy[FERRY_BLK_A_EXPORT_NAME + 1] = {
	[FERRY_BLK_A_EXPORT_NAME] = { .type = NLA_NUL_STRING, .len = FERRY_BLK_EXPORT_NAME_LEN, },
};

/* FERRY_BLK_CMD_MAP_ADD - do */
static const struct nla_policy ferry_blk_map_add_nl_policy[FERRY_BLK_A_MAP_POLL_QUEUES + 1] = {
	[FERRY_BLK_A_MAP_ADDR] = NLA_POLICY_MAX_LEN(16),
	[FERRY_BLK_A_MAP_PORT] = { .type = NLA_U16, },
	[FERRY_BLK_A_MAP_EXPORT] = { .type = NLA_NUL_STRING, .len = FERRY_BLK_EXPORT_NAME_LEN, },
	[FERRY_BLK_A_MAP_READ_ONLY] = { .type = NLA_FLAG, },
	[FERRY_BLK_A_MAP_CHANNELS] = { .type = NLA_U32, },
	[FERRY_BLK_A_MAP_DEPTH] = { .type = NLA_U32, },
	[FERRY_BLK_A_MAP_KEY] = { .type = NLA_NUL_STRING, .len = FERRY_BLK_KEY_NAME_LEN, },
	[FERRY_BLK_A_MAP_FAST_FAIL] = NLA_POLICY_FULL_RANGE(NLA_U32, &ferry_blk_a_map_fast_fail_range),
	[FERRY_BLK_A_MAP_GIVE_UP] = NLA_POLICY_FULL_RANGE(NLA_U32, &ferry_blk_a_map_give_up_range),
	[FERRY_BLK_A_MAP_RECONNECT_DELAY] = NLA_POLICY_RANGE(NLA_U32, 1, FERRY_BLK_MAX_RECONNECT_DELAY),
	[FERRY_BLK_A_MAP_POLL_QUEUES] = NLA_POLICY_MAX(NLA_U32, FERRY_BLK_MAX_POLL_QUEUES),
};

/* FERRY_BLK_CMD_MAP_DEL - do */
static const struct nla_policy ferry_blk_map_del_nl_policy[FERRY_BLK_A_MAP_FORCE + 1] = {
	[FERRY_BLK_A_MAP_INDEX] = { .type = NLA_U32, },
	[FERRY_BLK_A_MAP_FORCE] = { .type = NLA_FLAG, },
};

/* FERRY_BLK_CMD_MAP_SET - do */
static const struct nla_policy ferry_blk_map_set_nl_policy[FERRY_BLK_A_MAP_RECONNECT_DELAY + 1] = {
	[FERRY_BLK_A_MAP_INDEX] = { .type = NLA_U32, },
	[FERRY_BLK_A_MAP_FAST_FAIL] = NLA_POLICY_FULL_RANGE(NLA_U32, &ferry_blk_a_map_fast_fail_range),
	[FERRY_BLK_A_MAP_GIVE_UP] = NLA_POLICY_FULL_RANGE(NLA_U32, &ferry_blk_a_map_give_up_range),
	[FERRY_BLK_A_MAP_RECONNECT_DELAY] = NLA_POLICY_RANGE(NLA_U32, 1, FERRY_BLK_MAX_RECONNECT_DELAY),
};

/* Ops table for ferry_blk */
static const struct genl_split_ops ferry_blk_nl_ops[] = {
	{
		.cmd		= FERRY_BLK_CMD_EXPORT_ADD,
		.doit		= ferry_blk_nl_export_add_doit,
		.policy		= ferry_blk_export_add_nl_policy,
		.maxattr	= FERRY_BLK_A_EXPORT_UUID,
		.flags		= GENL_ADMIN_PERM | GENL_CMD_CAP_DO,
	},
	{
		.cmd		= FERRY_BLK_CMD_EXPORT_DEL,
		.doit		= ferry_blk_nl_export_del_doit,
		.policy		= ferry_blk_export_del_nl_policy,
		.maxattr	= FERRY_BLK_A_EXPORT_FORCE,
		.flags		= GENL_ADMIN_PERM | GENL_CMD_CAP_DO,
	},
	{
		.cmd		= FERRY_BLK_CMD_EXPORT_RESIZE,
		.doit		= ferry_blk_nl_export_resize_doit,
		.policy		= ferry_blk_export_resize_nl_policy,
		.maxattr	= FERRY_BLK_A_EXPORT_NAME,
		.flags		= GENL_ADMIN_PERM | GENL_CMD_CAP_DO,
	},
	{
		.cmd	= FERRY_BLK_CMD_EXPORT_GET,
		.dumpit	= ferry_blk_nl_export_get_dumpit,
		.flags	= GENL_CMD_CAP_DUMP,
	},
	{
		.cmd		= FERRY_BLK_CMD_MAP_ADD,
		.doit		= ferry_blk_nl_map_add_doit,
		.policy		= ferry_blk_map_add_nl_policy,
		.maxattr	= FERRY_BLK_A_MAP_POLL_QUEUES,
		.flags		= GENL_ADMIN_PERM | GENL_CMD_CAP_DO,
	},
	{
		.cmd		= FERRY_BLK_CMD_MAP_DEL,
		.doit		= ferry_blk_nl_map_del_doit,
		.policy		= ferry_blk_map_del_nl_policy,
		.maxattr	= FERRY_BLK_A_MAP_FORCE,
		.flags		= GENL_ADMIN_PERM | GENL_CMD_CAP_DO,
	},
	{
		.cmd	= FERRY_BLK_CMD_MAP_GET,
		.dumpit	= ferry_blk_nl_map_get_dumpit,
		.flags	= GENL_CMD_CAP_DUMP,
	},
	{
		.cmd		= FERRY_BLK_CMD_MAP_SET,
		.doit		= ferry_blk_nl_map_set_doit,
		.policy		= ferry_blk_map_set_nl_policy,
		.maxattr	= FERRY_BLK_A_MAP_RECONNECT_DELAY,
		.flags		= GENL_ADMIN_PERM | GENL_CMD_CAP_DO,
	},
};

static const struct genl_multicast_group ferry_blk_nl_mcgrps[] = {
	[FERRY_BLK_NLGRP_EVENTS] = { "events", },
};

struct genl_family ferry_blk_nl_family __ro_after_init = {
	.name		= FERRY_BLK_FAMILY_NAME,
	.version	= FERRY_BLK_FAMILY_VERSION,
	.netnsok	= true,
	.parallel_ops	= true,
	.module		= THIS_MODULE,
	.split_ops	= ferry_blk_nl_ops,
	.n_split_ops	= ARRAY_SIZE(ferry_blk_nl_ops),
	.mcgrps		= ferry_blk_nl_mcgrps,
	.n_mcgrps	= ARRAY_SIZE(ferry_blk_nl_mcgrps),
};
