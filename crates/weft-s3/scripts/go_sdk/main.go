// The AWS SDK for Go v2 against a running `weft up`, with the SDK's default settings
// (request checksums when supported, response checksums validated): one check per
// behaviour, reported as the Python client checks are (check_runner.py), ending with cargo's
// closing line so CI's total counts them.
//
// Usage: go run . CLUSTER_DIR [NAME ...]   (reads CLUSTER_DIR/s3.json; NAMEs pick checks)
package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

const mib = 1 << 20

var (
	ctx      = context.Background()
	client   *s3.Client
	endpoint string
	seq      int
)

// data is size deterministic bytes of seed (SHA-256 chained, as the Python checks make theirs).
func data(seed, size int) []byte {
	out := make([]byte, 0, size+32)
	block := sha256.Sum256([]byte(fmt.Sprint(seed)))
	for len(out) < size {
		block = sha256.Sum256(block[:])
		out = append(out, block[:]...)
	}
	return out[:size]
}

// bucket makes a fresh bucket, runs body with it, then empties and removes it.
func bucket(body func(name string) error) error {
	seq++
	name := fmt.Sprintf("go-%d-%d", os.Getpid(), seq)
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &name}); err != nil {
		return fmt.Errorf("create bucket: %w", err)
	}
	failed := body(name)
	pages := s3.NewListObjectsV2Paginator(client, &s3.ListObjectsV2Input{Bucket: &name})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			break
		}
		for _, object := range page.Contents {
			client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &name, Key: object.Key})
		}
	}
	if _, err := client.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &name}); err != nil && failed == nil {
		return fmt.Errorf("delete bucket: %w", err)
	}
	return failed
}

func read(name, key string, rng *string) ([]byte, *s3.GetObjectOutput, error) {
	got, err := client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: &name, Key: &key, Range: rng, ChecksumMode: types.ChecksumModeEnabled,
	})
	if err != nil {
		return nil, nil, err
	}
	defer got.Body.Close()
	body, err := io.ReadAll(got.Body)
	return body, got, err
}

// code is the S3 error code of err ("" when it is not an API error).
func code(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return ""
}

func expect(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

var checks = []struct {
	name string
	run  func() error
}{
	{"objects_round_trip_with_default_checksums_ranges_and_metadata", func() error {
		return bucket(func(name string) error {
			body := data(1, 300_000)
			put, err := client.PutObject(ctx, &s3.PutObjectInput{
				Bucket: &name, Key: aws.String("dir/a b"), Body: bytes.NewReader(body),
				ContentType: aws.String("text/plain"), Metadata: map[string]string{"color": "blue"},
			})
			if err != nil {
				return fmt.Errorf("put: %w", err)
			}
			sum := md5.Sum(body)
			if err := expect(strings.Trim(*put.ETag, `"`) == hex.EncodeToString(sum[:]), "ETag %s", *put.ETag); err != nil {
				return err
			}
			// The SDK sent a CRC32 by default; weft checked it and returns it.
			if err := expect(put.ChecksumCRC32 != nil, "PutObject returned no CRC32 (the SDK sends one by default)"); err != nil {
				return err
			}
			got, out, err := read(name, "dir/a b", nil)
			if err != nil || !bytes.Equal(got, body) {
				return fmt.Errorf("get: %v (equal %v)", err, bytes.Equal(got, body))
			}
			if err := expect(out.Metadata["color"] == "blue" && *out.ContentType == "text/plain", "headers %v %v", out.Metadata, *out.ContentType); err != nil {
				return err
			}
			part, _, err := read(name, "dir/a b", aws.String("bytes=1000-5999"))
			if err != nil || !bytes.Equal(part, body[1000:6000]) {
				return fmt.Errorf("ranged get: %v", err)
			}
			_, err = client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &name, Key: aws.String("missing")})
			var notFound *types.NotFound
			if err := expect(errors.As(err, &notFound), "HEAD of a missing key: %v", err); err != nil {
				return err
			}
			_, err = client.GetObject(ctx, &s3.GetObjectInput{Bucket: &name, Key: aws.String("missing")})
			var noKey *types.NoSuchKey
			return expect(errors.As(err, &noKey), "GET of a missing key: %v", err)
		})
	}},
	{"uploads_in_parts_by_the_transfer_manager_come_back_whole", func() error {
		return bucket(func(name string) error {
			body := data(2, 12*mib+12345)
			uploader := manager.NewUploader(client, func(u *manager.Uploader) { u.PartSize = 5 * mib })
			up, err := uploader.Upload(ctx, &s3.PutObjectInput{Bucket: &name, Key: aws.String("big"), Body: bytes.NewReader(body)})
			if err != nil {
				return fmt.Errorf("upload: %w", err)
			}
			if err := expect(strings.HasSuffix(strings.Trim(*up.ETag, `"`), "-3"), "ETag %s", *up.ETag); err != nil {
				return err
			}
			got, _, err := read(name, "big", nil)
			if err != nil || !bytes.Equal(got, body) {
				return fmt.Errorf("get: %v", err)
			}
			downloader := manager.NewDownloader(client, func(d *manager.Downloader) { d.PartSize = 5 * mib })
			buffer := manager.NewWriteAtBuffer(nil)
			if _, err := downloader.Download(ctx, buffer, &s3.GetObjectInput{Bucket: &name, Key: aws.String("big")}); err != nil {
				return fmt.Errorf("download: %w", err)
			}
			return expect(bytes.Equal(buffer.Bytes(), body), "the ranged download differs")
		})
	}},
	{"listings_page_and_group_by_prefix", func() error {
		return bucket(func(name string) error {
			keys := []string{"a/1", "a/2", "b", "c/x/1", "d"}
			for _, key := range keys {
				if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: &name, Key: aws.String(key), Body: strings.NewReader(key)}); err != nil {
					return err
				}
			}
			var seen []string
			pages := s3.NewListObjectsV2Paginator(client, &s3.ListObjectsV2Input{Bucket: &name, MaxKeys: aws.Int32(2)})
			for pages.HasMorePages() {
				page, err := pages.NextPage(ctx)
				if err != nil {
					return err
				}
				for _, o := range page.Contents {
					seen = append(seen, *o.Key)
				}
			}
			if err := expect(strings.Join(seen, ",") == strings.Join(keys, ","), "paged keys %v", seen); err != nil {
				return err
			}
			grouped, err := client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &name, Delimiter: aws.String("/")})
			if err != nil {
				return err
			}
			var prefixes []string
			for _, p := range grouped.CommonPrefixes {
				prefixes = append(prefixes, *p.Prefix)
			}
			return expect(strings.Join(prefixes, ",") == "a/,c/" && len(grouped.Contents) == 2, "grouped %v %d", prefixes, len(grouped.Contents))
		})
	}},
	{"copies_batch_deletes_and_conditional_writes", func() error {
		return bucket(func(name string) error {
			body := data(3, 100_000)
			if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: &name, Key: aws.String("src"), Body: bytes.NewReader(body)}); err != nil {
				return err
			}
			if _, err := client.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &name, Key: aws.String("dst"), CopySource: aws.String(name + "/src")}); err != nil {
				return fmt.Errorf("copy: %w", err)
			}
			got, _, err := read(name, "dst", nil)
			if err != nil || !bytes.Equal(got, body) {
				return fmt.Errorf("copied bytes: %v", err)
			}
			_, err = client.PutObject(ctx, &s3.PutObjectInput{Bucket: &name, Key: aws.String("src"), Body: strings.NewReader("x"), IfNoneMatch: aws.String("*")})
			if err := expect(code(err) == "PreconditionFailed", "If-None-Match on an existing key: %v", err); err != nil {
				return err
			}
			deleted, err := client.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &name, Delete: &types.Delete{Objects: []types.ObjectIdentifier{{Key: aws.String("src")}, {Key: aws.String("dst")}}}})
			if err != nil {
				return fmt.Errorf("delete objects: %w", err)
			}
			return expect(len(deleted.Deleted) == 2, "deleted %d", len(deleted.Deleted))
		})
	}},
	{"sse_s3_objects_are_sealed_and_read_back", func() error {
		return bucket(func(name string) error {
			body := data(4, 200_000)
			put, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: &name, Key: aws.String("s"), Body: bytes.NewReader(body), ServerSideEncryption: types.ServerSideEncryptionAes256})
			if err != nil {
				return err
			}
			if err := expect(put.ServerSideEncryption == types.ServerSideEncryptionAes256, "PutObject says %q", put.ServerSideEncryption); err != nil {
				return err
			}
			got, out, err := read(name, "s", aws.String("bytes=65530-65549"))
			if err != nil || !bytes.Equal(got, body[65530:65550]) {
				return fmt.Errorf("ranged get: %v", err)
			}
			return expect(out.ServerSideEncryption == types.ServerSideEncryptionAes256, "GetObject says %q", out.ServerSideEncryption)
		})
	}},
	{"sse_c_objects_need_https_and_their_key", func() error {
		return bucket(func(name string) error {
			body := data(6, 100_000)
			key := data(7, 32)
			sum := md5.Sum(key)
			encoded := base64.StdEncoding.EncodeToString(key)
			digest := base64.StdEncoding.EncodeToString(sum[:])
			put := &s3.PutObjectInput{
				Bucket: &name, Key: aws.String("c"), Body: bytes.NewReader(body),
				SSECustomerAlgorithm: aws.String("AES256"), SSECustomerKey: &encoded, SSECustomerKeyMD5: &digest,
			}
			_, err := client.PutObject(ctx, put)
			if !strings.HasPrefix(endpoint, "https://") {
				// S3 refuses SSE-C over plain HTTP, before it stores anything.
				return expect(code(err) == "InvalidRequest", "SSE-C over HTTP: %v", err)
			}
			if err != nil {
				return fmt.Errorf("put: %w", err)
			}
			got, err := client.GetObject(ctx, &s3.GetObjectInput{
				Bucket: &name, Key: aws.String("c"),
				SSECustomerAlgorithm: aws.String("AES256"), SSECustomerKey: &encoded, SSECustomerKeyMD5: &digest,
			})
			if err != nil {
				return fmt.Errorf("get with the key: %w", err)
			}
			read, _ := io.ReadAll(got.Body)
			got.Body.Close()
			if err := expect(bytes.Equal(read, body), "the SSE-C object's bytes differ"); err != nil {
				return err
			}
			_, err = client.GetObject(ctx, &s3.GetObjectInput{Bucket: &name, Key: aws.String("c")})
			return expect(code(err) == "InvalidRequest", "get without the key: %v", err)
		})
	}},
	{"presigned_urls_let_plain_http_get", func() error {
		return bucket(func(name string) error {
			body := data(5, 50_000)
			if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: &name, Key: aws.String("p"), Body: bytes.NewReader(body)}); err != nil {
				return err
			}
			presigned, err := s3.NewPresignClient(client).PresignGetObject(ctx, &s3.GetObjectInput{Bucket: &name, Key: aws.String("p")}, s3.WithPresignExpires(time.Minute))
			if err != nil {
				return err
			}
			response, err := httpClient.Get(presigned.URL)
			if err != nil {
				return err
			}
			defer response.Body.Close()
			got, _ := io.ReadAll(response.Body)
			return expect(response.StatusCode == 200 && bytes.Equal(got, body), "presigned GET: %d", response.StatusCode)
		})
	}},
}

var httpClient = http.DefaultClient

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: go run . CLUSTER_DIR [NAME ...]")
		os.Exit(2)
	}
	started := time.Now()
	text, err := os.ReadFile(filepath.Join(os.Args[1], "s3.json"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var conf struct {
		Endpoint  string `json:"endpoint"`
		AccessKey string `json:"access_key"`
		SecretKey string `json:"secret_key"`
		Region    string `json:"region"`
	}
	if err := json.Unmarshal(text, &conf); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// Default settings but where the cluster is: its endpoint, region and key (AWS_CA_BUNDLE
	// is honoured by the default config for an HTTPS gateway).
	cfg, err := config.LoadDefaultConfig(ctx,
		config.WithRegion(conf.Region),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(conf.AccessKey, conf.SecretKey, "")),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	endpoint = conf.Endpoint
	client = s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(conf.Endpoint)
		o.UsePathStyle = true
	})
	if hc, ok := cfg.HTTPClient.(*http.Client); ok && hc != nil {
		httpClient = hc
	}
	only := map[string]bool{}
	for _, name := range os.Args[2:] {
		only[name] = true
	}
	var failed []string
	ran := 0
	for _, check := range checks {
		if len(only) > 0 && !only[check.name] {
			continue
		}
		ran++
		began := time.Now()
		if err := check.run(); err != nil {
			failed = append(failed, check.name)
			fmt.Printf("FAIL  %s: %v\n", check.name, err)
			continue
		}
		fmt.Printf("ok    %s (%.1fs)\n", check.name, time.Since(began).Seconds())
	}
	fmt.Printf("aws-sdk-go-v2: %d of %d checks passed (%.1fs)\n", ran-len(failed), ran, time.Since(started).Seconds())
	if len(failed) > 0 {
		fmt.Println("failed: " + strings.Join(failed, ", "))
		os.Exit(1)
	}
	fmt.Printf("test result: ok. %d passed; 0 failed\n", ran)
}
