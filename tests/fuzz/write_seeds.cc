// Writes the seed corpora of the fuzz targets: the bytes a worker really
// sends at each point, made by the same encoders the workers use (the gate's
// and the handshake's state machines, TensorPipe's nop writer, the gRPC
// frame encoder, the store's request signing), in each target's layout.
//   write_seeds <gate|handshake|grpc_frame|store_request> <directory>
#include <ATen/ops/arange.h>
#include <grpcpp/support/byte_buffer.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "proto/store.pb.h"
#include "rpc/auth/handshake.h"
#include "rpc/codec.h"
#include "rpc/grpc/frame_codec.h"
#include "rpc/tensorpipe/guarded_tcp/secret_gate.h"
#include "rpc/tensorpipe/guarded_tcp/tensorpipe_internals.h"
#include "store/store_auth.h"

namespace {

using namespace tessera;
namespace tp = tensorpipe;

const auth::JobSecret kSecret("fuzz job secret");  // the targets' secret

// A piece of fuzz_support.h's layout: 2-byte length, then the bytes.
std::string Piece(const std::string& bytes) {
  const size_t n = bytes.size();
  return std::string{static_cast<char>(n & 0xff), static_cast<char>(n >> 8)} + bytes;
}

template <typename T>
std::string Nop(const T& object) {
  tp::NopHolder<T> holder;
  holder.getObject() = object;
  std::string bytes(holder.getSize(), '\0');
  tp::NopWriter writer(reinterpret_cast<uint8_t*>(bytes.data()), bytes.size());
  holder.write(writer);
  return bytes;
}

// A transport frame: 8-byte little-endian length, then the bytes.
std::string Frame(const std::string& bytes) {
  std::string frame(8, '\0');
  for (int i = 0; i < 8; ++i) frame[i] = static_cast<char>(uint64_t{bytes.size()} >> (8 * i));
  return frame + bytes;
}

std::vector<std::string> GateSeeds() {
  rpc::guarded_tcp::GateClient client(kSecret);
  rpc::guarded_tcp::GateServer server(kSecret);
  const std::string challenge = *server.OnGreeting(client.greeting());
  const std::string proof = *client.OnChallenge(challenge);
  tp::Packet hello;
  hello.Become(0);
  std::get<0>(hello) = tp::SpontaneousConnection{"worker0"};
  tp::Packet requested;
  requested.Become(1);
  std::get<1>(requested) = tp::RequestedConnection{7};
  tp::Brochure brochure;
  brochure.transportDomainDescriptors = {{"tcp", "tcp"}, {"shm", "shm:boot_1"}};
  brochure.channelDeviceDescriptors = {{"basic", {{tp::Device{tp::kCpuDeviceType, 0}, "any"}}}};
  tp::BrochureAnswer answer;
  answer.transport = "tcp";
  answer.address = "10.0.0.1:4000";
  answer.transportRegistrationIds = {{0, 3}};
  answer.channelRegistrationIds = {{"basic", {4}}};
  tp::Descriptor descriptor;
  descriptor.metadata = "envelope";
  descriptor.payloads.push_back({16, "p"});
  tp::Descriptor::Tensor tensor;
  tensor.length = 64;
  tensor.sourceDevice = tp::Device{tp::kCpuDeviceType, 0};
  descriptor.tensors.push_back(tensor);
  tp::DescriptorReply reply;
  reply.targetDevices = {tp::Device{tp::kCpuDeviceType, 0}};
  // Inputs that crashed an earlier ReadNopBounded (kept as regressions): a
  // BrochureAnswer whose map count outruns its entries, and a truncated
  // Descriptor (found with the unguarded reader in a second).
  const std::string map_count_overrun =
      absl::HexStringToBytes("04b907bd03746370bd0d31312e302e302e313a34303135bb83bd01bb7e");
  const std::string truncated_descriptor = absl::HexStringToBytes("05b903bd08656e7600656c6f28");
  return {map_count_overrun, truncated_descriptor,
          std::string(1, '\0') + Piece(client.greeting()) + Piece(proof) + Frame(Nop(hello)),
          std::string(1, '\1') + challenge,
          std::string(1, '\2') + Nop(requested),
          std::string(1, '\3') + Nop(brochure),
          std::string(1, '\4') + Nop(answer),
          std::string(1, '\5') + Nop(descriptor),
          std::string(1, '\6') + Nop(reply)};
}

std::vector<std::string> HandshakeSeeds() {
  rpc::ClientHandshake client(kSecret, rpc::PeerIdentity{"worker0", 0});
  rpc::ServerHandshake server(kSecret);
  const proto::Envelope hello = client.Hello();
  const proto::Envelope challenge = *server.OnHello(hello);
  const proto::Envelope proof = *client.OnChallenge(challenge);
  return {std::string(1, '\0') + Piece(hello.SerializeAsString()) +
              Piece(proof.SerializeAsString()),
          std::string(1, '\1') + Piece(challenge.SerializeAsString()) +
              Piece(rpc::ServerHandshake::Accepted().SerializeAsString())};
}

std::vector<std::string> GrpcFrameSeeds() {
  rpc::Message message;
  message.envelope.set_kind(proto::CALL);
  message.envelope.set_target("add");
  auto* args = message.envelope.add_args();
  (void)rpc::EncodeValue(at::arange(8, at::kFloat), args, &message);
  message.envelope.add_args()->set_int_value(3);
  grpc::ByteBuffer frame = *rpc::EncodeFrame(message, 1 << 20);
  std::vector<grpc::Slice> slices;
  (void)frame.Dump(&slices);
  std::string seed(1, static_cast<char>(slices.size() - 1));
  for (size_t i = 0; i + 1 < slices.size(); ++i) {
    seed += Piece(std::string(reinterpret_cast<const char*>(slices[i].begin()), slices[i].size()));
  }
  seed.append(reinterpret_cast<const char*>(slices.back().begin()), slices.back().size());
  grpc::ByteBuffer handshake = rpc::EncodeEnvelopeFrame(rpc::ClientHandshake(
      kSecret, rpc::PeerIdentity{"worker0", 0}).Hello());
  std::vector<grpc::Slice> handshake_slices;
  (void)handshake.Dump(&handshake_slices);
  std::string handshake_seed(1, '\0');
  for (const auto& slice : handshake_slices) {
    handshake_seed.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return {seed, handshake_seed};
}

std::vector<std::string> StoreRequestSeeds() {
  store::StoreAuth auth(kSecret);
  std::vector<std::string> seeds;
  auto add = [&](char method, const char* name, const google::protobuf::Message& request) {
    const auto signature = auth.Sign(name, request);
    seeds.push_back(std::string(1, method) + Piece(signature.nonce) + Piece(signature.mac) +
                    request.SerializeAsString());
  };
  proto::SetRequest set;
  set.set_key("tessera/workers/1");
  set.set_value("worker1\ntcp://10.0.0.2:4000\n\n");
  add(0, "Set", set);
  proto::GetRequest get;
  get.set_key("tessera/workers/0");
  get.set_timeout_ms(60000);
  add(1, "Get", get);
  proto::WaitRequest wait;
  wait.add_keys("a");
  wait.add_keys("b");
  add(2, "Wait", wait);
  proto::AddRequest increment;
  increment.set_key("counter");
  increment.set_delta(1);
  add(3, "Add", increment);
  proto::CompareSetRequest compare;
  compare.set_key("k");
  compare.set_desired("v");
  add(4, "CompareSet", compare);
  proto::DeleteRequest remove;
  remove.set_key("k");
  add(5, "Delete", remove);
  return seeds;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: write_seeds <gate|handshake|grpc_frame|store_request> <dir>\n");
    return 2;
  }
  const std::string target = argv[1];
  std::vector<std::string> seeds = target == "gate"            ? GateSeeds()
                                   : target == "handshake"     ? HandshakeSeeds()
                                   : target == "grpc_frame"    ? GrpcFrameSeeds()
                                   : target == "store_request" ? StoreRequestSeeds()
                                                               : std::vector<std::string>{};
  if (seeds.empty()) {
    std::fprintf(stderr, "write_seeds: unknown target '%s'\n", target.c_str());
    return 2;
  }
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream(std::string(argv[2]) + "/" + target + "_" + std::to_string(i), std::ios::binary)
        << seeds[i];
  }
  return 0;
}
