// Guava's own jump consistent hash, for comparison with liblb's `jump`.
//
//   java -cp guava.jar:. Jump < inputs
//
// Each stdin line is "input buckets" (input an unsigned 64-bit decimal, passed to Guava as the
// same 64 bits); prints Hashing.consistentHash(input, buckets) per line.
import com.google.common.hash.Hashing;
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;

public final class Jump {
  public static void main(String[] args) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out));
    String line;
    while ((line = in.readLine()) != null) {
      String[] parts = line.trim().split(" ");
      long input = Long.parseUnsignedLong(parts[0]);
      int buckets = Integer.parseInt(parts[1]);
      out.write(Integer.toString(Hashing.consistentHash(input, buckets)));
      out.newLine();
    }
    out.flush();
  }
}
