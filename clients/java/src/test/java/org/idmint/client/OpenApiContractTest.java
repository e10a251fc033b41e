// OpenApiContractTest: the routes, parameters and fields the client relies on (Wire.ROUTES)
// exist in /openapi.json of the server under test, with the JSON types the client reads and
// writes, required where the client needs them; and every error answer of those routes is
// the {"error": {"code", "message"}} the client reads; the answer headers it reads (the strict
// takes' idmint-node and idmint-owner) are documented on the route's 200. Issue 36, item 3.
package org.idmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.junit.jupiter.api.Test;

class OpenApiContractTest {
    private Map<?, ?> document;

    @Test
    void the_routes_and_shapes_the_client_uses_are_the_servers() throws Exception {
        String text = SharedNode.get().get("/openapi.json").body();
        document = (Map<?, ?>) Json.parse(text.getBytes(StandardCharsets.UTF_8), 64);
        Map<?, ?> paths = map(document.get("paths"), "paths");
        for (Wire.Route route : Wire.ROUTES) {
            Map<?, ?> operation = map(map(paths.get(route.template), route.template)
                    .get(route.method.toLowerCase(Locale.ROOT)), route.toString());
            List<?> parameters = operation.containsKey("parameters") ? (List<?>) operation.get("parameters") : List.of();
            for (String query : route.query) {
                assertTrue(hasParameter(parameters, query, "query"), route + ": no query parameter " + query);
            }
            if (route.template.contains("{tag}")) {
                assertTrue(hasParameter(parameters, "tag", "path"), route + ": no path parameter tag");
            }
            if (!route.request.isEmpty()) {
                Map<?, ?> body = map(operation.get("requestBody"), route + " request body");
                Object schema = jsonSchema(body, route + " request body");
                route.request.forEach((field, type) -> checkField(schema, field, type, route + " request"));
            }
            Map<?, ?> responses = map(operation.get("responses"), route + " responses");
            Object answer = jsonSchema(map(responses.get("200"), route + " 200"), route + " 200");
            route.answer.forEach((field, type) -> checkField(answer, field, type, route + " 200"));
            for (String header : route.answerHeaders) {
                Map<?, ?> headers = map(map(responses.get("200"), route + " 200").get("headers"), route + " 200 headers");
                Map<?, ?> documented = map(headers.get(header), route + " 200 header " + header);
                Object schema = documented.get("schema");
                assertTrue(schema == null || hasType(resolve(schema), "string"), route + ": header " + header
                        + " is not a string");
            }
            for (Map.Entry<?, ?> response : responses.entrySet()) {
                String status = (String) response.getKey();
                Map<?, ?> content = (Map<?, ?>) map(response.getValue(), status).get("content");
                if (!status.startsWith("2") && content != null && content.containsKey("application/json")) {
                    Object error = jsonSchema(map(response.getValue(), status), route + " " + status);
                    Wire.ERROR_FIELDS.forEach((field, type) -> checkField(error, field, type, route + " " + status));
                }
            }
        }
    }

    private Object jsonSchema(Map<?, ?> holder, String where) {
        Map<?, ?> content = map(holder.get("content"), where + " content");
        return map(content.get("application/json"), where + " application/json").get("schema");
    }

    /** Walks {@code a[].b} from {@code schema}: each step required, the last of {@code type}. */
    private void checkField(Object schema, String field, String type, String where) {
        Map<?, ?> at = resolve(schema);
        String[] steps = field.split("\\.");
        for (int i = 0; i < steps.length; i++) {
            boolean array = steps[i].endsWith("[]");
            String name = array ? steps[i].substring(0, steps[i].length() - 2) : steps[i];
            Map<?, ?> properties = map(at.get("properties"), where + " properties of " + field);
            Map<?, ?> property = resolve(properties.get(name));
            assertNotNull(property, where + ": no field " + name + " (" + field + ")");
            List<?> required = (List<?>) at.get("required");
            assertTrue(required != null && required.contains(name), where + ": " + name + " is not required");
            if (array) {
                assertTrue(hasType(property, "array"), where + ": " + name + " is not an array");
                property = resolve(property.get("items"));
            }
            if (i == steps.length - 1) {
                assertTrue(hasType(property, type), where + ": " + field + " is not " + type + ": " + property);
            } else {
                at = property;
            }
        }
    }

    private boolean hasType(Map<?, ?> schema, String type) {
        if (type.equals(schema.get("type"))) {
            return true;
        }
        for (String choice : new String[] {"oneOf", "anyOf"}) {
            if (schema.get(choice) instanceof List) {
                for (Object alternative : (List<?>) schema.get(choice)) {
                    if (hasType(resolve(alternative), type)) {
                        return true;
                    }
                }
            }
        }
        return false;
    }

    private Map<?, ?> resolve(Object schema) {
        Map<?, ?> map = map(schema, "schema");
        Object ref = map.get("$ref");
        if (ref instanceof String) {
            String name = ((String) ref).substring("#/components/schemas/".length());
            return resolve(map(map(document.get("components"), "components").get("schemas"), "schemas").get(name));
        }
        return map;
    }

    private static boolean hasParameter(List<?> parameters, String name, String in) {
        for (Object parameter : parameters) {
            Map<?, ?> p = (Map<?, ?>) parameter;
            if (name.equals(p.get("name")) && in.equals(p.get("in"))) {
                return true;
            }
        }
        return false;
    }

    private static Map<?, ?> map(Object value, String what) {
        assertNotNull(value, "the document has no " + what);
        assertTrue(value instanceof Map, what + " is not an object");
        return (Map<?, ?>) value;
    }

    @Test
    void the_contract_names_every_route_the_client_calls() {
        assertEquals(6, Wire.ROUTES.size());
    }
}
