/* libmemcached's own placement, for comparison with liblb's `ketama`.
 *
 *   ketama SERVERS < keys
 *
 * SERVERS holds "host port weight" lines; each stdin line is a key. Prints, per key, the
 * index (in SERVERS order) of the server libmemcached's weighted ketama continuum picks. */
#include <libmemcached/memcached.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: ketama SERVERS < keys\n");
    return 2;
  }
  memcached_st *memc = memcached_create(NULL);
  if (memc == NULL || memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED, 1)
                          != MEMCACHED_SUCCESS) {
    fprintf(stderr, "ketama: cannot set up libmemcached\n");
    return 1;
  }
  FILE *servers = fopen(argv[1], "r");
  if (servers == NULL) {
    perror(argv[1]);
    return 1;
  }
  char host[1024];
  unsigned port, weight;
  while (fscanf(servers, "%1023s %u %u", host, &port, &weight) == 3) {
    memcached_return_t rc =
        memcached_server_add_with_weight(memc, host, (in_port_t) port, weight);
    if (rc != MEMCACHED_SUCCESS) {
      fprintf(stderr, "ketama: adding %s:%u: %s\n", host, port, memcached_strerror(memc, rc));
      return 1;
    }
  }
  fclose(servers);
  char key[4096];
  while (fgets(key, sizeof key, stdin) != NULL) {
    size_t len = strcspn(key, "\n");
    printf("%u\n", memcached_generate_hash(memc, key, len));
  }
  memcached_free(memc);
  return 0;
}
