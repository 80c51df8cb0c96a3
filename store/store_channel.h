// How the store's clients talk gRPC — to the built-in store and to etcd
// alike: the channel's arguments (see Note [Store connections across a cut
// link]) and the translation of gRPC's status.
#pragma once

#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace tessera::store {

grpc::ChannelArguments StoreChannelArguments();

absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace tessera::store
