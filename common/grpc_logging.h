// gRPC's own log lines, through Tessera's logger (common/logging.h).
//
// gRPC writes its internal messages to stderr at its own levels; some are
// "errors" of its machinery that a user can do nothing about (a keepalive
// ping ending on a transport that closed, after a healed link cut) and that
// reached users' output in ordinary runs. Whatever matters reaches the user
// as a call's or the store's status instead. So gRPC's errors become
// Tessera's INFO lines and the rest DEBUG: silent at the default level
// (WARNING), there with TESSERA_LOG_LEVEL=INFO or DEBUG.
#pragma once

namespace tessera {

// Installs the routing, once per process; cheap to call again. Called
// wherever Tessera makes a gRPC channel or server.
void RouteGrpcLogging();

}  // namespace tessera
