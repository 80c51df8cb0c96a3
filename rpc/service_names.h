// The names of every internal service (messages of kind INTERNAL_CALL), in
// one place. Each belongs to one typed message (rpc/internal_service.h);
// user functions can never reach these (they live in a separate registry).
#pragma once

namespace tessera::rpc::services {

// The runtime's own (rpc/runtime_shutdown.cc): shutdown's liveness probe.
inline constexpr char kPing[] = "tessera.ping";
// Tracing (rpc/runtime_telemetry.cc): rank 0's trace clock, for aligning
// the others' (see Note [Trace clock alignment]).
inline constexpr char kTraceClock[] = "tessera.trace_clock";
// Elastic membership (rpc/runtime_membership.cc): a worker announcing
// that it (re)joined the running job, or that it leaves it.
inline constexpr char kJoin[] = "tessera.join";
inline constexpr char kLeave[] = "tessera.leave";

// RRefs (rref/rref_messages.h, see Note [RRef protocol]).
inline constexpr char kRRefRemote[] = "rref.remote";
inline constexpr char kRRefRemoteNew[] = "rref.remote_new";
inline constexpr char kRRefRemoteMethod[] = "rref.remote_method";
inline constexpr char kRRefCall[] = "rref.call";
inline constexpr char kRRefFetch[] = "rref.fetch";
inline constexpr char kRRefFork[] = "rref.fork";
inline constexpr char kRRefChildAccept[] = "rref.child_accept";
inline constexpr char kRRefDelete[] = "rref.delete";

// Distributed autograd (dist_autograd/autograd_messages.h).
inline constexpr char kAutogradBackward[] = "dist_autograd.backward";
inline constexpr char kAutogradRelease[] = "dist_autograd.release";

}  // namespace tessera::rpc::services
