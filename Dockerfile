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
# `dlq version` prints it. .git is not in the build context, so it comes from outside:
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) .
# (docker compose passes DLQ_VERSION).
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /dlq ./cmd/dlq

# Run: distroless static has CA certificates and tzdata, no shell, and a nonroot user.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /dlq /dlq
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/dlq"]
CMD ["serve"]
