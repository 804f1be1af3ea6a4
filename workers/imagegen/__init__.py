"""Image generation (workers/imagegen): turns that ask for a picture, from the router's
`image_generation` intent, run a diffusers pipeline; progress and the image stream to the
client over the Redis relay, the image is stored in the blob store, the trace records how."""
