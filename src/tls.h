/* What the frame interface (src/frame.c) needs of the TLS transport
 * (src/tls.c): its ops table, to tell its endpoints apart, and the
 * reading-side calls lull_endpoint_read_stop / _read_start / _shutdown
 * dispatch to. Defined in every build (the table is a stub without
 * OpenSSL, and no endpoint ever uses it). */
#ifndef LULL_TLS_H
#define LULL_TLS_H

#include "frame.h"

extern const lull_frame_ops lull__tls_ops;
/* Reading paused (on false) or resumed; shut down. Open ends only. */
int lull__tls_read(lull_endpoint *ep, bool on);
int lull__tls_shutdown(lull_endpoint *ep);

#endif
