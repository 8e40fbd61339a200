/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C shims for rust/genl.rs and rust/netns.rs (generic netlink families, their
 * messages and attributes; network namespace references), linked into each
 * module that has a netlink family: ferry and ferry_blk. Each does exactly
 * what the function or macro it is named after does.
 */
#ifndef FERRY_GENL_HELPERS_H
#define FERRY_GENL_HELPERS_H

#include <linux/types.h>

struct genl_family;
struct genl_info;
struct net;
struct netlink_callback;
struct netlink_ext_ack;
struct nlattr;
struct sk_buff;

struct sk_buff *ferry_helper_genlmsg_new(size_t payload);
void ferry_helper_nlmsg_free(struct sk_buff *skb);
void *ferry_helper_genlmsg_put_reply(struct sk_buff *skb,
				     struct genl_info *info);
void *ferry_helper_genlmsg_put_dump(struct sk_buff *skb,
				    struct netlink_callback *cb);
void ferry_helper_genlmsg_end(struct sk_buff *skb, void *hdr);
void ferry_helper_genlmsg_cancel(struct sk_buff *skb, void *hdr);
int ferry_helper_genlmsg_reply(struct sk_buff *skb, struct genl_info *info);
struct genl_info *ferry_helper_genl_info_dump(struct netlink_callback *cb);
struct net *ferry_helper_genl_info_net(struct genl_info *info);
struct net *ferry_helper_netlink_cb_net(struct netlink_callback *cb);
long *ferry_helper_netlink_cb_args(struct netlink_callback *cb);
const u8 *ferry_helper_skb_data(const struct sk_buff *skb);
unsigned int ferry_helper_skb_len(const struct sk_buff *skb);
int ferry_helper_nla_put_u32(struct sk_buff *skb, int type, u32 value);
int ferry_helper_nla_put_u64(struct sk_buff *skb, int type, u64 value, int pad);
int ferry_helper_nla_put_string(struct sk_buff *skb, int type, const char *s);
struct nlattr *ferry_helper_nla_nest_start(struct sk_buff *skb, int type);
void ferry_helper_nla_nest_end(struct sk_buff *skb, struct nlattr *start);
void ferry_helper_nla_nest_cancel(struct sk_buff *skb, struct nlattr *start);
void ferry_helper_nl_set_err_msg_attr(struct netlink_ext_ack *extack,
				      const struct nlattr *attr,
				      const char *msg);
void ferry_helper_nl_set_err_msg(struct netlink_ext_ack *extack,
				 const char *msg);
int ferry_helper_genlmsg_multicast_netns(const struct genl_family *family,
					 struct sk_buff *skb, struct net *net,
					 void *hdr, unsigned int group);
int ferry_helper_genlmsg_multicast_allns(const struct genl_family *family,
					 struct sk_buff *skb, void *hdr,
					 unsigned int group);
void *ferry_helper_genlmsg_put_ntf(const struct genl_family *family,
				    struct sk_buff *skb, u8 cmd);
int ferry_helper_nla_put_u16(struct sk_buff *skb, int type, u16 value);
int ferry_helper_nla_put(struct sk_buff *skb, int type, int len,
			 const void *data);
void ferry_helper_nl_set_err_attr_miss(struct netlink_ext_ack *extack,
				       unsigned int type);
void ferry_helper_get_net(struct net *net);
void ferry_helper_put_net(struct net *net);

#endif
