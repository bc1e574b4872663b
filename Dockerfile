# syntax=docker/dockerfile:1
# One image for every role: `evenkeel broker | operator | rebalancer | proxy | dev | perf | …`.
#   docker build -t evenkeel:dev .
#   docker run --rm evenkeel:dev --help
# Build stage: Rust on Debian bookworm. librdkafka (rdkafka-sys, with zstd) is built from source
# with its own configure script and make; zlib and zstd are linked statically, so the runtime
# needs nothing beyond glibc and libgcc.
ARG RUST_VERSION=1
FROM rust:${RUST_VERSION}-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Static zlib (libz-sys builds its bundled copy): the distroless runtime has no libz.so.1.
ENV LIBZ_SYS_STATIC=1 \
    CARGO_TERM_COLOR=never \
    CARGO_INCREMENTAL=0
COPY Cargo.toml Cargo.lock ./
COPY src ./src
# The registry and target directory live in BuildKit cache mounts, so rebuilds are incremental;
# the binary is copied out of the cache in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked --bin evenkeel \
 && install -D -m 0755 target/release/evenkeel /out/evenkeel \
 && strip --strip-debug /out/evenkeel \
 && mkdir -p /out/data \
 && ! ldd /out/evenkeel | grep -Ev 'linux-vdso|ld-linux|libc\.so|libm\.so|libgcc_s\.so|libpthread\.so|libdl\.so|librt\.so|libutil\.so' \
 && /out/evenkeel --version

# Runtime: distroless (glibc, libgcc, CA certificates, no shell), as user 65532 (nonroot).
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="evenkeel" \
      org.opencontainers.image.description="Kafka-compatible streaming for Kubernetes: broker, operator, rebalancer, proxy" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/evenkeel/evenkeel"
COPY --from=build /out/evenkeel /usr/local/bin/evenkeel
# Brokers keep their logs here (the operator mounts a PersistentVolume on /var/lib/evenkeel);
# owned by the runtime user so that `docker run … dev` can write ./.evenkeel too.
COPY --from=build --chown=65532:65532 /out/data /var/lib/evenkeel
WORKDIR /var/lib/evenkeel
USER 65532:65532
# 9092 Kafka clients, 9093 controller quorum, 9404 broker metrics, 8080 proxy, 8081 operator.
EXPOSE 9092 9093 9404 8080 8081
ENTRYPOINT ["/usr/local/bin/evenkeel"]
CMD ["--help"]
