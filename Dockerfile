# syntax=docker/dockerfile:1
# Images: the relay (default target) and the demo order service (--target orders).
#   docker build -t outbox-relay --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg COMMIT=$(git rev-parse HEAD) .
# The build stage runs scripts/build-release.sh, the same script `make check-build` runs
# without Docker: a static binary (CGO_ENABLED=0, -trimpath, version stamps).

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
ARG DATE=unknown
RUN VERSION="$VERSION" COMMIT="$COMMIT" DATE="$DATE" bash scripts/build-release.sh /out

# The demo order service + stock consumer (examples/orders).
FROM gcr.io/distroless/static-debian12:nonroot AS orders
COPY --from=build /out/orders-demo /usr/local/bin/orders-demo
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/orders-demo"]

# The relay: no shell, no package manager, a non-root user (uid 65532).
FROM gcr.io/distroless/static-debian12:nonroot AS relay
COPY --from=build /out/outbox-relay /usr/local/bin/outbox-relay
COPY config.example.yaml /etc/outbox-relay/config.example.yaml
USER nonroot:nonroot
# No OUTBOX_* ENV here: the environment beats the config file, so a baked-in variable would
# silently override a mounted --config. The defaults (http.addr :9464, JSON logs without a
# terminal) need none.
EXPOSE 9464
# The image has no shell or curl: the binary checks its own /healthz, at the address the
# relay (process 1) was configured with: its --config file, flags and environment.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["/usr/local/bin/outbox-relay", "healthcheck", "--pid=1"]
ENTRYPOINT ["/usr/local/bin/outbox-relay"]
CMD ["run"]
