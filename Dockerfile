# syntax=docker/dockerfile:1
#
# msgproxy container image.
#   docker build -t msgproxy .
#   docker run --rm -p 3307:3307 \
#     -v "$PWD/docker/msgproxy.toml:/etc/msgproxy/msgproxy.toml:ro" \
#     -e MSGPROXY_CONFIG=/etc/msgproxy/msgproxy.toml \
#     -e MSGPROXY_BACKEND=mysql://root@db-host:3306/test msgproxy
# The proxy listens on 0.0.0.0:3307 here, and refuses a non-loopback address unless users are configured:
# mount a config file with [[users]] (see docker/msgproxy.toml). docker-compose.yml wires all of this up.

# ---- build stage ----
FROM rust:1-bookworm AS builder
WORKDIR /src
# The whole context (see .dockerignore): the workspace names tools/, throwaway/ and test files, which cargo
# wants to see even when it only builds the binary.
COPY . .
RUN cargo build --release --locked -p msgproxy --bin msgproxy

# ---- runtime stage ----
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin msgproxy
COPY --from=builder /src/target/release/msgproxy /usr/local/bin/msgproxy
USER msgproxy
EXPOSE 3307
ENTRYPOINT ["msgproxy"]
CMD ["--listen","0.0.0.0:3307"]
