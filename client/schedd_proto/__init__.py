"""The generated gRPC code of the schedd.v1 API (tools/genproto.sh writes every other module here).

PROTOCOL_VERSION is the API's compatibility level: raised when a message a client relies on
changes meaning. It lives here, in the one package the SDK, the worker and the daemon all
install, so `schedctl --version` and `schedd --version` (schedd.versions) read the same number.
"""

PROTOCOL_VERSION = 1
