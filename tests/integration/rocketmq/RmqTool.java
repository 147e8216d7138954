// A RocketMQ client for the compatibility tests (compiled at test time against `rmq classpath`).
//   produce NAMESRV TOPIC PREFIX COUNT SECONDS BATCH [STOPFILE]   sync sends of COUNT messages (BATCH per send), each
//                                              retried until SEND_OK or the deadline (keys PREFIX0,
//                                              PREFIX1, ...); prints "ACK key ms msgId offsetMsgId
//                                              queueOffset brokerName queueId" per acknowledged
//                                              message, "END acked failed";
//                                              ends early once STOPFILE exists
//   consume NAMESRV TOPIC SECONDS               reads every queue from its first offset; prints
//                                              "MSG key" per message, "END n" once quiet or at the deadline
//   load NAMESRV TOPIC THREADS BATCH SIZE WARMUP_S SECONDS MAX_MESSAGES
//                                              THREADS threads share one producer, each sending BATCH
//                                              messages of SIZE bytes per sync send (bench-peer-rocketmq);
//                                              WARMUP_S untimed, then SECONDS (or MAX_MESSAGES) timed;
//                                              prints "START" when the timed part begins, then
//                                              "RESULT acked failed elapsed_ms p50_ms p99_ms cpu_ms"
//                                              (cpu_ms: this JVM's CPU in the timed part)
import java.util.*;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.common.message.*;

public class RmqTool {
    public static void main(String[] a) throws Exception {
        if (a[0].equals("load")) load(a[1], a[2], Integer.parseInt(a[3]), Integer.parseInt(a[4]), Integer.parseInt(a[5]),
                                      Integer.parseInt(a[6]), Integer.parseInt(a[7]), Long.parseLong(a[8]));
        else if (a[0].equals("produce")) produce(a[1], a[2], a[3], Integer.parseInt(a[4]), Integer.parseInt(a[5]), Integer.parseInt(a[6]), a.length > 7 ? a[7] : null);
        else consume(a[1], a[2], Integer.parseInt(a[3]));
        System.exit(0);
    }

    static void produce(String ns, String topic, String prefix, int count, int seconds, int batch, String stopFile) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("autoswitch-test-producer");
        p.setNamesrvAddr(ns);
        p.setSendMsgTimeout(3000);
        p.setRetryTimesWhenSendFailed(0);
        p.start();
        long deadline = System.currentTimeMillis() + seconds * 1000L;
        int acked = 0, failed = 0, i = 0;
        java.io.File stop = stopFile == null ? null : new java.io.File(stopFile);
        while (i < count && System.currentTimeMillis() < deadline && (stop == null || !stop.exists())) {
            List<Message> msgs = new ArrayList<>();
            for (int k = 0; k < batch && i + k < count; k++) {
                Message m = new Message(topic, ("body-" + (i + k)).getBytes());
                m.setKeys(prefix + (i + k));
                msgs.add(m);
            }
            try {
                SendResult r = msgs.size() == 1 ? p.send(msgs.get(0)) : p.send(msgs);
                if (r.getSendStatus() == SendStatus.SEND_OK) {
                    long now = System.currentTimeMillis();
                    // a batch's ids come comma-joined, in the batch's order
                    String[] ids = String.valueOf(r.getMsgId()).split(",");
                    String[] offs = String.valueOf(r.getOffsetMsgId()).split(",");
                    for (int k = 0; k < msgs.size(); k++) {
                        System.out.println("ACK " + msgs.get(k).getKeys() + " " + now + " "
                            + (k < ids.length ? ids[k] : "-") + " " + (k < offs.length ? offs[k] : "-") + " "
                            + (r.getQueueOffset() + k) + " " + r.getMessageQueue().getBrokerName() + " "
                            + r.getMessageQueue().getQueueId());
                    }
                    System.out.flush();
                    acked += msgs.size();
                    i += msgs.size();
                } else {
                    failed++;
                    System.out.println("NOTOK " + r.getSendStatus());
                }
            } catch (Exception e) {
                failed++;
                System.out.println("FAIL " + e.getClass().getSimpleName() + " " + String.valueOf(e.getMessage()).split("\n")[0]);
                System.out.flush();
                Thread.sleep(200);
            }
        }
        System.out.println("END " + acked + " " + failed);
        p.shutdown();
    }

    static void load(String ns, String topic, int threads, int batch, int size, int warmupS, int seconds,
                     long maxMessages) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("autoswitch-bench-producer");
        p.setNamesrvAddr(ns);
        p.setSendMsgTimeout(10000);
        p.setRetryTimesWhenSendFailed(2);
        p.start();
        byte[] body = new byte[size];
        java.util.Arrays.fill(body, (byte) 'x');
        final long warmEnd = System.currentTimeMillis() + warmupS * 1000L;
        final long[] window = new long[3];     // timed start, timed end (ms), CPU at the start (ns)
        final com.sun.management.OperatingSystemMXBean os =
            (com.sun.management.OperatingSystemMXBean) java.lang.management.ManagementFactory.getOperatingSystemMXBean();
        final java.util.concurrent.atomic.AtomicLong acked = new java.util.concurrent.atomic.AtomicLong();
        final java.util.concurrent.atomic.AtomicLong failed = new java.util.concurrent.atomic.AtomicLong();
        final List<Long> lat = Collections.synchronizedList(new ArrayList<>());
        final java.util.concurrent.CyclicBarrier start = new java.util.concurrent.CyclicBarrier(threads, () -> {
            window[0] = System.currentTimeMillis();
            window[1] = window[0] + seconds * 1000L;
            window[2] = os.getProcessCpuTime();
            System.out.println("START");
            System.out.flush();
        });
        Thread[] ts = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            ts[t] = new Thread(() -> {
                try {
                    boolean timed = false;
                    List<Long> mine = new ArrayList<>();
                    while (true) {
                        long now = System.currentTimeMillis();
                        if (!timed && now >= warmEnd) { start.await(); timed = true; }
                        if (timed && (System.currentTimeMillis() >= window[1] || acked.get() >= maxMessages)) break;
                        List<Message> msgs = new ArrayList<>();
                        for (int k = 0; k < batch; k++) msgs.add(new Message(topic, body));
                        long t0 = System.nanoTime();
                        try {
                            SendResult r = batch == 1 ? p.send(msgs.get(0)) : p.send(msgs);
                            if (r.getSendStatus() == SendStatus.SEND_OK) {
                                if (timed) { acked.addAndGet(batch); mine.add(System.nanoTime() - t0); }
                            } else if (timed) failed.addAndGet(batch);
                        } catch (Exception e) {
                            if (timed) failed.addAndGet(batch);
                        }
                    }
                    lat.addAll(mine);
                } catch (Exception e) {
                    System.out.println("FAIL " + e);
                }
            });
            ts[t].start();
        }
        for (Thread t : ts) t.join();
        long elapsed = System.currentTimeMillis() - window[0];
        long cpuMs = (os.getProcessCpuTime() - window[2]) / 1000000L;
        List<Long> s = new ArrayList<>(lat);
        Collections.sort(s);
        double p50 = s.isEmpty() ? 0 : s.get(Math.min(s.size() - 1, (int) (0.50 * s.size()))) / 1e6;
        double p99 = s.isEmpty() ? 0 : s.get(Math.min(s.size() - 1, (int) (0.99 * s.size()))) / 1e6;
        System.out.println("RESULT " + acked.get() + " " + failed.get() + " " + elapsed + " " + p50 + " " + p99 + " " + cpuMs);
        System.out.flush();
        p.shutdown();
    }

    static void consume(String ns, String topic, int seconds) throws Exception {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer("autoswitch-test-reader-" + System.nanoTime());
        c.setNamesrvAddr(ns);
        c.setAutoCommit(false);
        c.start();
        Collection<MessageQueue> qs = c.fetchMessageQueues(topic);
        c.assign(qs);
        for (MessageQueue q : qs) c.seekToBegin(q);
        long deadline = System.currentTimeMillis() + seconds * 1000L;
        long quietSince = System.currentTimeMillis();
        int n = 0;
        while (System.currentTimeMillis() < deadline) {
            List<MessageExt> got = c.poll(1000);
            if (got.isEmpty()) {
                if (n > 0 && System.currentTimeMillis() - quietSince > 5000) break;
                continue;
            }
            quietSince = System.currentTimeMillis();
            for (MessageExt m : got) { System.out.println("MSG " + m.getKeys()); n++; }
            System.out.flush();
        }
        System.out.println("END " + n);
        c.shutdown();
    }
}
