# schedd in a container: one image for a node (`serve`, the default), a worker (`worker`), the
# init steps (`certs`, `gen-secret`) and schedctl. compose.yaml runs a 3-node TLS cluster and a
# worker with it; docs/deployment.md, "Run it in containers", says how.
#
#   docker build -t schedd .
#   docker run -v schedd-data:/var/lib/schedd -v ./n1.toml:/etc/schedd/node.toml:ro ... schedd
#
# Nothing secret is in the image: the cluster secret, the certificates and the tokens are made
# at run time into volumes (or mounted), never copied in at build time (.dockerignore keeps the
# checkout's own data, venvs and keys out of the build context too).

ARG PYTHON_IMAGE=python:3.11-slim

# ---- build: the three wheels and every third-party wheel, then a venv from them alone --------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY tools/build-wheels.sh tools/
COPY client/ client/
COPY worker/ worker/
COPY schedd/ schedd/
# One pip run builds schedd-client and schedd-worker from here, so schedd's dependency on them
# never reaches an index; the venv is then installed with no index at all (the path
# docs/deployment.md documents).
RUN tools/build-wheels.sh --deps --out /wheels \
    && python -m venv /opt/schedd/venv \
    && /opt/schedd/venv/bin/pip install --no-index --find-links /wheels schedd \
    && /opt/schedd/venv/bin/pip check

# ---- runtime ------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="schedd" \
      org.opencontainers.image.description="A Raft-replicated job scheduler: node, worker and schedctl" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed uid/gid, so volumes and bind-mounted files can be owned by it from outside.
ARG SCHEDD_UID=10001
# The home and data volume (0700) and the mount points of the compose file's volumes: a named
# volume starts with the owner and mode of the directory it is mounted on.
RUN groupadd --system --gid "${SCHEDD_UID}" schedd \
    && useradd --system --uid "${SCHEDD_UID}" --gid schedd --home-dir /var/lib/schedd \
       --no-create-home --shell /usr/sbin/nologin schedd \
    && install -d -m 0700 -o schedd -g schedd /var/lib/schedd /etc/schedd/pki /etc/schedd/tls \
       /etc/schedd/secret /etc/schedd/creds
COPY --from=build /opt/schedd/venv /opt/schedd/venv
ENV PATH=/opt/schedd/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/var/lib/schedd
USER ${SCHEDD_UID}:${SCHEDD_UID}
WORKDIR /var/lib/schedd
VOLUME ["/var/lib/schedd"]
# gRPC (clients, workers, peers' forwarding), Raft (peers only), metrics (Prometheus text).
EXPOSE 7070 7001 9101
# Liveness through gRPC health (grpc.health.v1, service schedd.liveness), dialled with the
# node's own certificate as its config says; a worker container turns this off (compose.yaml).
HEALTHCHECK --interval=15s --timeout=10s --start-period=30s --retries=3 \
    CMD ["schedd", "health", "--config", "/etc/schedd/node.toml", "--timeout", "5"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["schedd"]
CMD ["serve", "--config", "/etc/schedd/node.toml"]
