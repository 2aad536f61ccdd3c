# failover: a static binary on distroless, running as a non-root user (uid 65532).
#   docker build -t failover \
#     --build-arg VERSION="$(git describe --tags --always --dirty)" --build-arg REVISION="$(git rev-parse HEAD)" .
#   docker run --rm -p 127.0.0.1:4000:4000 -e FAILOVER_LISTEN=0.0.0.0:4000 \
#     --env-file testdata/env/openai-anthropic.env -v "$PWD/secrets:/run/secrets:ro" failover
# Inside a container FAILOVER_LISTEN must be 0.0.0.0:4000 for anything outside the container to
# reach it (compose, docker run -p); as a Kubernetes pod sidecar the default 127.0.0.1:4000 is right.
# `failover version` (and the listening log line, -check and failover_build_info) report VERSION and
# REVISION: .dockerignore keeps .git out of the build context, so Go cannot stamp them itself.
# Without the args the image reports the version under development (the default below: the
# release after the last one in CHANGELOG.md, marked -dev) and revision unknown.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION="0.4.0-dev"
ARG REVISION=""
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION} -X main.revision=${REVISION}" -o /out/failover .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/failover /failover
COPY --from=build /src/LICENSE /LICENSE
USER 65532:65532
EXPOSE 4000 9464
ENTRYPOINT ["/failover"]
