"""Tessera's release version: the shared library's soname and file name, the
CMake package's version and tessera.pc's (scripts/install.sh reads it)."""

TESSERA_VERSION = "1.0.0"

# The soname's number: raised when a release breaks the ABI.
TESSERA_SOVERSION = "1"
