# syntax=docker/dockerfile:1

# Build: a static binary (no cgo), so the runtime image needs no libc.
FROM golang:1.26 AS build
WORKDIR /src
# Modules first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /dlq ./cmd/dlq

# Run: distroless static has CA certificates and tzdata, no shell, and a nonroot user.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /dlq /dlq
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/dlq"]
CMD ["serve"]
