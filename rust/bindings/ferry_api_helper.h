/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What Rust consumers of ferry are bound to: the kernel API alone. bindgen
 * reads this with ferry_api_parameters; rust/ferry_api.rs includes the output.
 */
#include <ferry/ferry.h>
