"""An unmodified gRPC client (Debian's python3-grpcio) against a Tessera worker.

Speaks only the public protos (proto/rpc.proto, proto/worker_service.proto,
the standard grpc.health.v1 and server reflection): health check and watch,
a reflection lookup of the Worker service, the job-secret handshake, calls
of a registered function with an int and with a tensor, and the refusals a
stranger gets. Run by grpc_external_client_test with the job secret in
TESSERA_JOB_SECRET; exits non-zero with the failed check's message.

usage: external_client.py ADDRESS GENERATED_DIR
"""
import hashlib
import hmac
import os
import queue
import struct
import sys

import grpc

ADDRESS, GENERATED = sys.argv[1], sys.argv[2]
sys.path.insert(0, GENERATED)
from proto import rpc_pb2, worker_service_pb2  # noqa: E402
from tests.rpc.python import health_pb2, reflection_pb2  # noqa: E402
from google.protobuf import descriptor_pb2  # noqa: E402

METHOD = "/tessera.proto.Worker/Exchange"
SECRET = os.environ["TESSERA_JOB_SECRET"].encode()
TIMEOUT_S = 30
UNAUTHENTICATED = 16
FLOAT = 6  # c10::ScalarType::Float


def check(condition, what):
    if not condition:
        sys.exit("FAILED: " + what)
    print("ok:", what)


def fields(*parts):
    return b"".join(struct.pack("<I", len(p)) + p for p in parts)


def server_proof(secret, client_nonce, server_nonce):
    data = fields(b"tessera-auth-v1", b"server", client_nonce, server_nonce)
    return hmac.new(secret, data, hashlib.sha256).digest()


def client_proof(secret, server_nonce, client_nonce, name, rank):
    data = fields(b"tessera-auth-v1", b"client", server_nonce, client_nonce,
                  name.encode(), str(rank).encode())
    return hmac.new(secret, data, hashlib.sha256).digest()


def auth_frame(**step):
    return worker_service_pb2.Frame(envelope=rpc_pb2.Envelope(
        kind=rpc_pb2.AUTH, auth=rpc_pb2.AuthStep(**step)))


class Stream:
    """One Worker.Exchange stream; frames go in and come out one at a time."""

    def __init__(self, channel, raw=False):
        self.outbox = queue.Queue()
        serialize = (lambda b: b) if raw else worker_service_pb2.Frame.SerializeToString
        call = channel.stream_stream(METHOD, request_serializer=serialize,
                                     response_deserializer=worker_service_pb2.Frame.FromString)
        self.replies = call(iter(self.outbox.get, None), timeout=TIMEOUT_S)

    def send(self, frame):
        self.outbox.put(frame)

    def receive(self):
        return next(self.replies)

    def close(self):
        self.outbox.put(None)


def handshake(stream, secret, name="python-client", rank=0, nonce=None):
    """Runs the handshake; returns (hello, proof, verdict envelope)."""
    nonce = nonce or os.urandom(32)
    hello = auth_frame(hello=rpc_pb2.AuthHello(worker_name=name, rank=rank, nonce=nonce))
    stream.send(hello)
    challenge = stream.receive().envelope.auth.challenge
    check(hmac.compare_digest(challenge.proof,
                              server_proof(SECRET, nonce, challenge.nonce)),
          "the worker proves it knows the job secret")
    proof = auth_frame(proof=rpc_pb2.AuthProof(
        proof=client_proof(secret, challenge.nonce, nonce, name, rank)))
    stream.send(proof)
    return hello, proof, stream.receive().envelope


def expect_refused(stream, what):
    try:
        verdict = stream.receive().envelope
        check(verdict.status.code == UNAUTHENTICATED, what + ": refused with a reason")
        stream.receive()
        check(False, what + ": stream left open")
    except grpc.RpcError as error:
        check(error.code() == grpc.StatusCode.UNAUTHENTICATED,
              what + ": stream closed UNAUTHENTICATED (%s)" % error.details())


def main():
    channel = grpc.insecure_channel(ADDRESS)
    grpc.channel_ready_future(channel).result(timeout=TIMEOUT_S)

    health = channel.unary_unary("/grpc.health.v1.Health/Check",
                                 request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                                 response_deserializer=health_pb2.HealthCheckResponse.FromString)
    for service in ("", "tessera.proto.Worker"):
        reply = health(health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT_S)
        check(reply.status == health_pb2.HealthCheckResponse.SERVING,
              "health of '%s' is SERVING" % service)
    try:
        health(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=TIMEOUT_S)
        check(False, "health of an unknown service is refused")
    except grpc.RpcError as error:
        check(error.code() == grpc.StatusCode.NOT_FOUND,
              "health of an unknown service is NOT_FOUND (%s)" % error.details())
    watch = channel.unary_stream("/grpc.health.v1.Health/Watch",
                                 request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                                 response_deserializer=health_pb2.HealthCheckResponse.FromString)
    updates = watch(health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT_S)
    check(next(updates).status == health_pb2.HealthCheckResponse.SERVING,
          "health watch first reports SERVING")
    updates.cancel()

    # Reflection (the test's worker enables it): the file defining the Worker service.
    reflect = channel.stream_stream(
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
    answers = reflect(iter([reflection_pb2.ServerReflectionRequest(
        file_containing_symbol="tessera.proto.Worker")]), timeout=TIMEOUT_S)
    answer = next(answers)
    files = [descriptor_pb2.FileDescriptorProto.FromString(b)
             for b in answer.file_descriptor_response.file_descriptor_proto]
    services = {f.name: [(s.name, [m.name for m in s.method]) for s in f.service] for f in files}
    check(services.get("proto/worker_service.proto") == [("Worker", ["Exchange"])],
          "reflection describes tessera.proto.Worker (%s)" % services)
    answers.cancel()

    # A member of the job: handshake, then calls of a registered function.
    stream = Stream(channel)
    hello, proof, verdict = handshake(stream, SECRET)
    check(verdict.auth.HasField("accepted"), "the worker accepts the job secret")
    stream.send(worker_service_pb2.Frame(envelope=rpc_pb2.Envelope(
        kind=rpc_pb2.CALL, target="echo", request_id=1, args=[rpc_pb2.Value(int_value=42)])))
    reply = stream.receive().envelope
    check(reply.request_id == 1 and reply.status.code == 0 and reply.result.int_value == 42,
          "echo(42) returns 42")
    values = struct.pack("<3f", 1.5, -2.0, 4.25)
    stream.send(worker_service_pb2.Frame(
        envelope=rpc_pb2.Envelope(kind=rpc_pb2.CALL, target="echo", request_id=2,
                                  args=[rpc_pb2.Value(tensor_index=0)],
                                  tensors=[rpc_pb2.TensorMeta(dtype=FLOAT, sizes=[3])]),
        tensor_data=[values]))
    frame = stream.receive()
    check(frame.envelope.request_id == 2 and list(frame.envelope.tensors[0].sizes) == [3]
          and frame.tensor_data[0] == values, "echo(tensor) returns the same 3 floats")
    stream.send(worker_service_pb2.Frame(envelope=rpc_pb2.Envelope(
        kind=rpc_pb2.CALL, target="no_such_function", request_id=3)))
    reply = stream.receive().envelope
    check(reply.status.code != 0 and "no_such_function" in reply.status.message,
          "an unknown function is an error naming it")
    stream.close()

    # A replay of that handshake: same hello and proof on a new stream.
    replay = Stream(channel)
    replay.send(hello)
    replay.receive()  # a fresh challenge
    replay.send(proof)
    expect_refused(replay, "a replayed handshake")

    # Wrong secret.
    stranger = Stream(channel)
    nonce = os.urandom(32)
    stranger.send(auth_frame(hello=rpc_pb2.AuthHello(worker_name="x", rank=0, nonce=nonce)))
    challenge = stranger.receive().envelope.auth.challenge
    stranger.send(auth_frame(proof=rpc_pb2.AuthProof(
        proof=client_proof(b"not the secret", challenge.nonce, nonce, "x", 0))))
    expect_refused(stranger, "a wrong secret")

    # A call before any handshake.
    eager = Stream(channel)
    eager.send(worker_service_pb2.Frame(envelope=rpc_pb2.Envelope(
        kind=rpc_pb2.CALL, target="echo", request_id=1, args=[rpc_pb2.Value(int_value=1)])))
    expect_refused(eager, "a call without a handshake")

    # Garbage after an honest handshake closes only that stream.
    raw = Stream(channel, raw=True)
    nonce = os.urandom(32)
    raw.send(auth_frame(hello=rpc_pb2.AuthHello(worker_name="raw", rank=0,
                                                nonce=nonce)).SerializeToString())
    challenge = raw.receive().envelope.auth.challenge
    raw.send(auth_frame(proof=rpc_pb2.AuthProof(proof=client_proof(
        SECRET, challenge.nonce, nonce, "raw", 0))).SerializeToString())
    check(raw.receive().envelope.auth.HasField("accepted"), "raw stream accepted")
    raw.send(b"\x0a\xff\xff\xff\xff\x0f garbage")
    try:
        raw.receive()
        check(False, "a malformed frame got an answer")
    except grpc.RpcError as error:
        check(error.code() == grpc.StatusCode.INVALID_ARGUMENT,
              "a malformed frame ends its stream INVALID_ARGUMENT (%s)" % error.details())
    print("all checks passed")


if __name__ == "__main__":
    main()
