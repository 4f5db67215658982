# syntax=docker/dockerfile:1

# Build: a static binary (no cgo), so the runtime image needs no libc.
# The exact Go release go.mod names, so an image rebuilt later compiles the same code
# with the same compiler.
FROM golang:1.26.8 AS build
WORKDIR /src
# Modules first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# `dlq version` prints the release from the file VERSION and the commit, which comes
# from outside because .git is not in the build context:
#   docker build --build-arg COMMIT=$(git rev-parse --short=12 HEAD) .
# (docker compose passes DLQ_COMMIT). `make release` builds the same image without a
# container engine (cmd/dlq-release), for linux/amd64 and linux/arm64.
# timetzdata: the runtime image's zone data is not needed then (CRON_TZ schedules).
ARG COMMIT=
RUN CGO_ENABLED=0 go build -trimpath -tags timetzdata \
    -ldflags="-s -w -X main.version=$(cat VERSION) -X main.commit=${COMMIT}" -o /dlq ./cmd/dlq

# Run: distroless static has CA certificates and tzdata, no shell, and a nonroot user.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /dlq /dlq
USER nonroot:nonroot
# In a container the API listens on the container's interface, so that a published
# port reaches it (dlq's own default, 127.0.0.1, suits a host install).
ENV DLQ_HTTP_ADDR=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/dlq"]
CMD ["serve"]
