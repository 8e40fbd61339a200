// SPDX-License-Identifier: GPL-2.0
/*
 * The symbols of ferry's kernel API (include/ferry/ferry.h), defined in Rust
 * (src/ferry/export.rs) and exported here, in the "FERRY" namespace.
 */
#include <linux/export.h>
#include <ferry/ferry.h>

EXPORT_SYMBOL_NS_GPL(ferry_service_register, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_service_unregister, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_session_open, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_session_close, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_session_get, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_session_put, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_session_id, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_session_set_reconnect_delay, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_session_peer, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_session_limits, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_send, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_send_on, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_poll, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_poll_channel, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_reset_channel, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_submit, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_submit_on, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_incoming_header, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_incoming_dir, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_incoming_data_len, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_incoming_tag, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_rdma_read, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_rdma_write, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_rdma_write_respond, "FERRY");
EXPORT_SYMBOL_NS_GPL(ferry_respond, "FERRY");

#ifdef CONFIG_FERRY_KUNIT_TEST
/* Test builds only: see include/ferry/ferry_test.h. */
#include <ferry/ferry_test.h>

EXPORT_SYMBOL_NS_GPL(ferry_test_misbehave, "FERRY");
#endif
