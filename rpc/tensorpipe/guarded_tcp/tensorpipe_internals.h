// Note [TensorPipe internals]: the one seam through which Tessera uses
// TensorPipe's non-public headers.
//
// TensorPipe's public API (<tensorpipe/tensorpipe.h>) offers contexts,
// pipes and its own transports, but no way to write a transport: a
// transport is a set of classes built on the library's internal
// "boilerplate" templates, its epoll loop and socket helpers, and the pipe
// handshake is made of its internal nop (serialization) types. The guarded
// TCP transport (guarded_tcp.h) must be a transport — it replaces `uv`
// under TensorPipe's pipes, which then keep their shm/cma fast paths — and
// its hello-frame check parses the handshake's nop types before TensorPipe
// does. So those internals are needed, and they are included here and
// nowhere else (scripts/check_layering.sh fails the build otherwise).
//
// They are pinned by Debian's libtensorpipe-dev 0.0~git20220513.bb1473a;
// on an upgrade, what to re-check is exactly this list:
//  - transport boilerplate (ContextImplBoilerplate, ListenerImplBoilerplate,
//    ConnectionImplBoilerplate, ContextBoilerplate): the virtuals a
//    transport implements;
//  - EpollLoop::EventHandler, DeferredExecutor, Socket, Fd: what the
//    transport's own loop (event_loop.h) and sockets are built from;
//  - nop.h / core/nop_types.h: the wire structures of the pipe handshake
//    (bounded_nop.h walks them; the handshake fuzzer and the tests' seeds
//    write them);
//  - tensorpipe/common/error.h: the error base class transports report with;
//  - transport/connection.h, transport/listener.h: the transport-level
//    handles the guarded transport's tests drive directly.
#pragma once

#include <tensorpipe/common/deferred_executor.h>
#include <tensorpipe/common/epoll_loop.h>
#include <tensorpipe/common/error.h>
#include <tensorpipe/common/fd.h>
#include <tensorpipe/common/nop.h>
#include <tensorpipe/common/socket.h>
#include <tensorpipe/core/nop_types.h>
#include <tensorpipe/transport/connection.h>
#include <tensorpipe/transport/connection_impl_boilerplate.h>
#include <tensorpipe/transport/context.h>
#include <tensorpipe/transport/context_boilerplate.h>
#include <tensorpipe/transport/context_impl_boilerplate.h>
#include <tensorpipe/transport/listener.h>
#include <tensorpipe/transport/listener_impl_boilerplate.h>
