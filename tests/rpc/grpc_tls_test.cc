// The gRPC agent over TLS with certificates from files: a world on mutual
// TLS works end to end, while a plaintext client, and a TLS client without
// a client certificate, cannot connect to its workers.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <ATen/ops/zeros.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "tests/testing/test_certificates.h"
#include "tests/testing/rpc_world.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// A CA and one certificate (for 127.0.0.1) it signed, made with openssl.
class GrpcTlsTest : public RpcWorld {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/tls");
    ASSERT_TRUE(MakeTestCertificates(dir_, {"IP:127.0.0.1", "DNS:localhost"}).ok());
    // Children inherit these; rank 0 reads them in InProcessOptions.
    for (const auto& [name, value] : MutualTlsEnv(dir_)) setenv(name.c_str(), value.c_str(), 1);
  }

  // Whether a channel with `credentials` gets connected to worker1 within
  // `patience` (a refused client never does, however long it waits).
  bool Connects(std::shared_ptr<grpc::ChannelCredentials> credentials, absl::Duration patience) {
    auto channel = grpc::CreateChannel(rt().workers()[1].address, std::move(credentials));
    return channel->WaitForConnected(absl::ToChronoTime(absl::Now() + patience));
  }

  std::string dir_;
};

TEST_F(GrpcTlsTest, MutualTlsWorldWorksAndStrangersCannotConnect) {
  StartWorld(3);
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{4}), 4);
  EXPECT_EQ(ThreeHopNestedSum(), 6.0f);

  EXPECT_FALSE(Connects(grpc::InsecureChannelCredentials(), absl::Seconds(3)))
      << "plaintext client connected";
  grpc::SslCredentialsOptions server_only;
  server_only.pem_root_certs = ReadFile(dir_ + "/ca.pem");
  EXPECT_FALSE(Connects(grpc::SslCredentials(server_only), absl::Seconds(3)))
      << "TLS client without a certificate connected to a mutual-TLS worker";
  grpc::SslCredentialsOptions mutual = server_only;
  mutual.pem_private_key = ReadFile(dir_ + "/worker.key");
  mutual.pem_cert_chain = ReadFile(dir_ + "/worker.pem");
  EXPECT_TRUE(Connects(grpc::SslCredentials(mutual), absl::Seconds(60)))
      << "a certified client could not connect";
}

}  // namespace
}  // namespace tessera::testing
