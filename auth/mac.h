// Message authentication with the job secret: HMAC-SHA256 over a list of
// fields, each prefixed by its length (4 bytes, little-endian), so no two
// field lists encode alike and clients in other languages can build the
// same bytes. Used by the connection handshake (rpc/auth/handshake.h) and
// the store's signed calls (store/store_auth.h).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "auth/job_secret.h"

namespace tessera::auth {

std::string Mac(const JobSecret& secret, std::initializer_list<std::string_view> fields);

// Compares two MACs in time independent of where they differ.
bool SameMac(std::string_view a, std::string_view b);

}  // namespace tessera::auth
