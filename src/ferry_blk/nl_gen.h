/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR BSD-3-Clause) */
/* Do not edit directly, auto-generated from: */
/*	Documentation/netlink/specs/ferry-blk.yaml */
/* YNL-GEN kernel header */
/* To regenerate run: tools/net/ynl/ynl-regen.sh */

#ifndef _LINUX_FERRY_BLK_GEN_H
#define _LINUX_FERRY_BLK_GEN_H

#include <net/netlink.h>
#include <net/genetlink.h>

#include <uapi/linux/ferry_blk.h>

int ferry_blk_nl_export_add_doit(struct sk_buff *skb, struct genl_info *info);
int ferry_blk_nl_export_del_doit(struct sk_buff *skb, struct genl_info *info);
int ferry_blk_nl_export_resize_doit(struct sk_buff *skb,
				    struct genl_info *info);
int ferry_blk_nl_export_get_dumpit(struct sk_buff *skb,
				   struct netlink_callback *cb);
int ferry_blk_nl_map_add_doit(struct sk_buff *skb, struct genl_info *info);
int ferry_blk_nl_map_del_doit(struct sk_buff *skb, struct genl_info *info);
int ferry_blk_nl_map_get_dumpit(struct sk_buff *skb,
				struct netlink_callback *cb);
int ferry_blk_nl_map_set_doit(struct sk_buff *skb, struct genl_info *info);

enum {
	FERRY_BLK_NLGRP_EVENTS,
};

extern struct genl_family ferry_blk_nl_family;

#endif /* _LINUX_FERRY_BLK_GEN_H */
