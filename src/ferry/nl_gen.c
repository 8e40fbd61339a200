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

/* FERRY_CMD_LISTENER_ADD - do */
static const struct nla_policy ferry_listener_add_nl_policy[FERRY_A_LISTENER_MAX_CHANNELS + 1] = {
	[FERRY_A_LISTENER_ADDR] = NLA_POLICY_MAX_LEN(16),
	[FERRY_A_LISTENER_PORT] = { .type = NLA_U16, },
	[FERRY_A_LISTENER_KEY] = { .type = NLA_NUL_STRING, .len = FERRY_SERVICE_NAME_LEN, },
	[FERRY_A_LISTENER_MAX_SESSIONS] = NLA_POLICY_MIN(NLA_U32, 1),
	[FERRY_A_LISTENER_MAX_SESSIONS_PER_PEER] = NLA_POLICY_MIN(NLA_U32, 1),
	[FERRY_A_LISTENER_MAX_PENDING] = NLA_POLICY_MIN(NLA_U32, 1),
	[FERRY_A_LISTENER_MAX_PENDING_PER_PEER] = NLA_POLICY_MIN(NLA_U32, 1),
	[FERRY_A_LISTENER_MAX_CHANNELS] = NLA_POLICY_RANGE(NLA_U32, 1, 64),
};

/* FERRY_CMD_LISTENER_DEL - do */
static const struct nla_policy ferry_listener_del_nl_policy[FERRY_A_LISTENER_ID + 1] = {
	[FERRY_A_LISTENER_ID] = { .type = NLA_U32, },
};

/* FERRY_CMD_LISTENER_GET - do */
static const struct nla_policy ferry_listener_get_nl_policy[FERRY_A_LISTENER_ID + 1] = {
	[FERRY_A_LISTENER_ID] = { .type = NLA_U32, },
};

/* FERRY_CMD_SESSION_CONNECT - do */
static const struct nla_policy ferry_session_connect_nl_policy[FERRY_A_SESSION_KEY + 1] = {
	[FERRY_A_SESSION_ADDR] = NLA_POLICY_MAX_LEN(16),
	[FERRY_A_SESSION_PORT] = { .type = NLA_U16, },
	[FERRY_A_SESSION_SERVICE] = { .type = NLA_NUL_STRING, .len = FERRY_SERVICE_NAME_LEN, },
	[FERRY_A_SESSION_CHANNELS] = { .type = NLA_U32, },
	[FERRY_A_SESSION_QUEUE_DEPTH] = { .type = NLA_U32, },
	[FERRY_A_SESSION_MAX_MSG_SIZE] = { .type = NLA_U32, },
	[FERRY_A_SESSION_HEARTBEAT_MS] = { .type = NLA_U32, },
	[FERRY_A_SESSION_TIMEOUT_MS] = { .type = NLA_U32, },
	[FERRY_A_SESSION_GIVE_UP_S] = { .type = NLA_U32, },
	[FERRY_A_SESSION_KEY] = { .type = NLA_NUL_STRING, .len = FERRY_SERVICE_NAME_LEN, },
};

/* FERRY_CMD_SESSION_DISCONNECT - do */
static const struct nla_policy ferry_session_disconnect_nl_policy[FERRY_A_SESSION_ID + 1] = {
	[FERRY_A_SESSION_ID] = { .type = NLA_U32, },
};

/* FERRY_CMD_SESSION_GET - do */
static const struct nla_policy ferry_session_get_nl_policy[FERRY_A_SESSION_ID + 1] = {
	[FERRY_A_SESSION_ID] = { .type = NLA_U32, },
};

/* FERRY_CMD_KEY_ADD - do */
static const struct nla_policy ferry_key_add_nl_policy[FERRY_A_KEY_SECRET + 1] = {
	[FERRY_A_KEY_NAME] = { .type = NLA_NUL_STRING, .len = FERRY_SERVICE_NAME_LEN, },
	[FERRY_A_KEY_SECRET] = NLA_POLICY_MAX_LEN(128),
};

/* FERRY_CMD_KEY_DEL - do */
static const struct nla_policy ferry_key_del_nl_policy[FERRY_A_KEY_NAME + 1] = {
	[FERRY_A_KEY_NAME] = { .type = NLA_NUL_STRING, .len = FERRY_SERVICE_NAME_LEN, },
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
	{
		.cmd		= FERRY_CMD_LISTENER_ADD,
		.doit		= ferry_nl_listener_add_doit,
		.policy		= ferry_listener_add_nl_policy,
		.maxattr	= FERRY_A_LISTENER_MAX_CHANNELS,
		.flags		= GENL_ADMIN_PERM | GENL_CMD_CAP_DO,
	},
	{
		.cmd		= FERRY_CMD_LISTENER_DEL,
		.doit		= ferry_nl_listener_del_doit,
		.policy		= ferry_listener_del_nl_policy,
		.maxattr	= FERRY_A_LISTENER_ID,
		.flags		= GENL_ADMIN_PERM | GENL_CMD_CAP_DO,
	},
	{
		.cmd		= FERRY_CMD_LISTENER_GET,
		.doit		= ferry_nl_listener_get_doit,
		.policy		= ferry_listener_get_nl_policy,
		.maxattr	= FERRY_A_LISTENER_ID,
		.flags		= GENL_CMD_CAP_DO,
	},
	{
		.cmd	= FERRY_CMD_LISTENER_GET,
		.dumpit	= ferry_nl_listener_get_dumpit,
		.flags	= GENL_CMD_CAP_DUMP,
	},
	{
		.cmd		= FERRY_CMD_SESSION_CONNECT,
		.doit		= ferry_nl_session_connect_doit,
		.policy		= ferry_session_connect_nl_policy,
		.maxattr	= FERRY_A_SESSION_KEY,
		.flags		= GENL_ADMIN_PERM | GENL_CMD_CAP_DO,
	},
	{
		.cmd		= FERRY_CMD_SESSION_DISCONNECT,
		.doit		= ferry_nl_session_disconnect_doit,
		.policy		= ferry_session_disconnect_nl_policy,
		.maxattr	= FERRY_A_SESSION_ID,
		.flags		= GENL_ADMIN_PERM | GENL_CMD_CAP_DO,
	},
	{
		.cmd		= FERRY_CMD_SESSION_GET,
		.doit		= ferry_nl_session_get_doit,
		.policy		= ferry_session_get_nl_policy,
		.maxattr	= FERRY_A_SESSION_ID,
		.flags		= GENL_CMD_CAP_DO,
	},
	{
		.cmd	= FERRY_CMD_SESSION_GET,
		.dumpit	= ferry_nl_session_get_dumpit,
		.flags	= GENL_CMD_CAP_DUMP,
	},
	{
		.cmd	= FERRY_CMD_SERVICE_GET,
		.dumpit	= ferry_nl_service_get_dumpit,
		.flags	= GENL_CMD_CAP_DUMP,
	},
	{
		.cmd		= FERRY_CMD_KEY_ADD,
		.doit		= ferry_nl_key_add_doit,
		.policy		= ferry_key_add_nl_policy,
		.maxattr	= FERRY_A_KEY_SECRET,
		.flags		= GENL_ADMIN_PERM | GENL_CMD_CAP_DO,
	},
	{
		.cmd		= FERRY_CMD_KEY_DEL,
		.doit		= ferry_nl_key_del_doit,
		.policy		= ferry_key_del_nl_policy,
		.maxattr	= FERRY_A_KEY_NAME,
		.flags		= GENL_ADMIN_PERM | GENL_CMD_CAP_DO,
	},
	{
		.cmd	= FERRY_CMD_KEY_GET,
		.dumpit	= ferry_nl_key_get_dumpit,
		.flags	= GENL_ADMIN_PERM | GENL_CMD_CAP_DUMP,
	},
};

static const struct genl_multicast_group ferry_nl_mcgrps[] = {
	[FERRY_NLGRP_EVENTS] = { "events", },
};

struct genl_family ferry_nl_family __ro_after_init = {
	.name		= FERRY_FAMILY_NAME,
	.version	= FERRY_FAMILY_VERSION,
	.netnsok	= true,
	.parallel_ops	= true,
	.module		= THIS_MODULE,
	.split_ops	= ferry_nl_ops,
	.n_split_ops	= ARRAY_SIZE(ferry_nl_ops),
	.mcgrps		= ferry_nl_mcgrps,
	.n_mcgrps	= ARRAY_SIZE(ferry_nl_mcgrps),
};
