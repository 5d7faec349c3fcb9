// Publishes messages to a topic with the official Node.js client (@google-cloud/pubsub).
// Usage: node publish.mjs TOPIC < messages.json   where messages.json is
//   [{"data": "text", "attributes": {"k": "v"}}, ...]
// The client honours PUBSUB_EMULATOR_HOST and GOOGLE_CLOUD_PROJECT like the Python one.
// Prints one message id per line, in order.
import { readFileSync } from "node:fs";
import { PubSub } from "@google-cloud/pubsub";

const [topicName] = process.argv.slice(2);
const messages = JSON.parse(readFileSync(0, "utf8"));
const pubsub = new PubSub({ projectId: process.env.GOOGLE_CLOUD_PROJECT });
const topic = pubsub.topic(topicName);
for (const { data, attributes } of messages) {
  const id = await topic.publishMessage({ data: Buffer.from(data), attributes });
  console.log(id);
}
await pubsub.close();
